//! Who a task runs as: a task's `run.user` or a worker's `--task-user`,
//! read as `uid`, `uid:gid` or a user name looked up in a passwd file, and
//! the choice of a worker's default uid for a new container.
//!
//! No I/O: the caller reads the passwd file (the host's for the process
//! runtime, the image's for runc) and passes its text.

/// A user as written, before any passwd file is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserSpec {
    /// `1000` or `1000:1000`; without a gid the gid is the uid.
    Numeric { uid: u32, gid: Option<u32> },
    /// `builder`: uid and gid come from the passwd file.
    Name(String),
}

/// uid and gid, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Ids {
    pub uid: u32,
    pub gid: u32,
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// Reads `uid`, `uid:gid` or a user name (letters, digits, `_-.`, not all
/// digits, 32 characters at most).
pub fn parse_user(s: &str) -> Result<UserSpec, String> {
    let number = |part: &str, what: &str| {
        part.parse::<u32>()
            .map_err(|_| format!("{what} {part:?} in user {s:?} is not a number below 2^32"))
    };
    if s.is_empty() {
        return Err("the user is empty: give uid, uid:gid or a user name".into());
    }
    if let Some((uid, gid)) = s.split_once(':') {
        return Ok(UserSpec::Numeric {
            uid: number(uid, "uid")?,
            gid: Some(number(gid, "gid")?),
        });
    }
    if s.chars().all(|c| c.is_ascii_digit()) {
        return Ok(UserSpec::Numeric {
            uid: number(s, "uid")?,
            gid: None,
        });
    }
    if s.len() > 32 || !s.chars().all(is_name_char) || s.starts_with('-') {
        return Err(format!(
            "user {s:?} is neither uid, uid:gid nor a user name (letters, digits, _ - .)"
        ));
    }
    Ok(UserSpec::Name(s.to_string()))
}

/// Resolves a user against the text of a passwd file (`name:x:uid:gid:...`).
/// A numeric user needs no entry.
pub fn resolve_user(spec: &UserSpec, passwd: Option<&str>) -> Result<Ids, String> {
    match spec {
        UserSpec::Numeric { uid, gid } => Ok(Ids {
            uid: *uid,
            gid: gid.unwrap_or(*uid),
        }),
        UserSpec::Name(name) => {
            let passwd = passwd.ok_or_else(|| {
                format!("user {name:?}: there is no /etc/passwd to look it up in; give uid:gid")
            })?;
            for line in passwd.lines() {
                let fields: Vec<&str> = line.split(':').collect();
                if fields.len() < 4 || fields[0] != name {
                    continue;
                }
                let parse = |f: &str| f.parse::<u32>().ok();
                return match (parse(fields[2]), parse(fields[3])) {
                    (Some(uid), Some(gid)) => Ok(Ids { uid, gid }),
                    _ => Err(format!("user {name:?}: its passwd entry is malformed")),
                };
            }
            Err(format!("user {name:?} is not in /etc/passwd; give uid:gid"))
        }
    }
}

/// How many containers of one worker can run at once with their own uid.
pub const TASK_UID_SLOTS: u32 = 1000;

/// The ids of a new container that names no user: `base + n` for the
/// smallest slot `n` no other container holds, so two tasks running side by
/// side never share a uid (and cannot read each other's files or signal
/// each other). `None` when every slot is taken.
pub fn pick_task_ids(base: Ids, taken: &[Ids]) -> Option<Ids> {
    (0..TASK_UID_SLOTS)
        .filter_map(|n| {
            Some(Ids {
                uid: base.uid.checked_add(n)?,
                gid: base.gid.checked_add(n)?,
            })
        })
        .find(|ids| !taken.iter().any(|t| t.uid == ids.uid))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
                          builder:x:1001:1002::/home/builder:/bin/sh\n\
                          broken:x:abc:1::/:/bin/sh\n";

    #[test]
    fn users_parse_as_numbers_or_names_and_bad_ones_are_refused_clearly() {
        let cases: &[(&str, Result<UserSpec, &str>)] = &[
            (
                "1000",
                Ok(UserSpec::Numeric {
                    uid: 1000,
                    gid: None,
                }),
            ),
            ("0", Ok(UserSpec::Numeric { uid: 0, gid: None })),
            (
                "1000:50",
                Ok(UserSpec::Numeric {
                    uid: 1000,
                    gid: Some(50),
                }),
            ),
            ("builder", Ok(UserSpec::Name("builder".into()))),
            ("www-data", Ok(UserSpec::Name("www-data".into()))),
            ("", Err("empty")),
            ("1000:", Err("gid \"\"")),
            (":5", Err("uid \"\"")),
            ("99999999999", Err("not a number")),
            ("-1", Err("neither")),
            ("a b", Err("neither")),
            ("ro/ot", Err("neither")),
            ("builder:wheel", Err("uid \"builder\"")),
        ];
        for (input, want) in cases {
            match (parse_user(input), want) {
                (Ok(got), Ok(want)) => assert_eq!(&got, want, "{input:?}"),
                (Err(got), Err(want)) => assert!(got.contains(want), "{input:?}: {got}"),
                (got, want) => panic!("{input:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn names_resolve_from_passwd_and_numbers_need_no_entry() {
        type Case<'a> = (&'a str, Option<&'a str>, Result<(u32, u32), &'a str>);
        let cases: &[Case] = &[
            ("builder", Some(PASSWD), Ok((1001, 1002))),
            ("root", Some(PASSWD), Ok((0, 0))),
            ("1234", None, Ok((1234, 1234))),
            ("1234:7", None, Ok((1234, 7))),
            ("ghost", Some(PASSWD), Err("not in /etc/passwd")),
            ("broken", Some(PASSWD), Err("malformed")),
            ("builder", None, Err("no /etc/passwd")),
        ];
        for (input, passwd, want) in cases {
            let got = resolve_user(&parse_user(input).unwrap(), *passwd);
            match (got, want) {
                (Ok(ids), Ok((uid, gid))) => assert_eq!((ids.uid, ids.gid), (*uid, *gid)),
                (Err(e), Err(w)) => assert!(e.contains(w), "{input}: {e}"),
                (got, want) => panic!("{input:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn each_new_container_takes_the_lowest_free_slot() {
        let base = Ids { uid: 100, gid: 200 };
        let at = |n: u32| Ids {
            uid: 100 + n,
            gid: 200 + n,
        };
        assert_eq!(pick_task_ids(base, &[]), Some(at(0)));
        assert_eq!(pick_task_ids(base, &[at(0), at(1)]), Some(at(2)));
        assert_eq!(pick_task_ids(base, &[at(1)]), Some(at(0)));
        // A container running as a user of its own choosing takes no slot
        // unless its uid is one.
        assert_eq!(pick_task_ids(base, &[Ids { uid: 0, gid: 0 }]), Some(at(0)));
        let all: Vec<Ids> = (0..TASK_UID_SLOTS).map(at).collect();
        assert_eq!(pick_task_ids(base, &all), None);
        // Near the top of the id space the slots that would overflow are skipped.
        let top = Ids {
            uid: u32::MAX,
            gid: 5,
        };
        assert_eq!(pick_task_ids(top, &[]), Some(top));
        assert_eq!(pick_task_ids(top, &[top]), None);
    }
}
