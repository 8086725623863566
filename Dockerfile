# hangar's container image, built FROM scratch: no base image from a registry.
#
# Build it with deploy/build-image.sh (tag hangar:dev). The script builds a
# statically linked hangar on the host (glibc static, rustls/ring, no OpenSSL)
# and lays out the build context this file expects:
#
#   hangar    the static binary
#   busybox   a static busybox (Debian's busybox-static): /bin/sh and the
#             usual tools, for process-runtime tasks and for the resource
#             type scripts (#!/bin/sh) the worker installs
#
# Not included (see docs/kubernetes.md, "The image"): git (the git resource
# type needs it on the worker) and runc (only for tasks with an image; the
# process runtime works without). Add them in an image built FROM this one.
FROM scratch

COPY busybox /bin/busybox
# A minimal root filesystem: busybox's applets as links, root and nobody
# users, a world-writable /tmp, the work dir and a hosts file.
RUN ["/bin/busybox", "sh", "-c", "set -e; \
  /bin/busybox mkdir -p /usr/bin /usr/sbin /sbin /usr/local/bin /etc /root /tmp /var/tmp /work /data; \
  /bin/busybox --install -s /bin; \
  chmod 1777 /tmp /var/tmp; \
  printf 'root:x:0:0:root:/root:/bin/sh\\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\\nhangar:x:65532:65532:hangar:/data:/bin/false\\n' > /etc/passwd; \
  printf 'root:x:0:\\nnobody:x:65534:\\nhangar:x:65532:\\n' > /etc/group; \
  printf 'hosts: files dns\\n' > /etc/nsswitch.conf; \
  chown 65532:65532 /data"]

COPY hangar /usr/local/bin/hangar

ENV PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin
# web: 8080 (API); worker: 7788 (volume API, /healthz).
EXPOSE 8080 7788
WORKDIR /data
# The entrypoint is hangar itself, as PID 1: the preStop hooks in
# deploy/kubernetes signal it with `kill -USR1 1` / `kill -USR2 1`.
ENTRYPOINT ["/usr/local/bin/hangar"]
CMD ["--help"]
