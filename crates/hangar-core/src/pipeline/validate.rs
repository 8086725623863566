//! The rules between a config's parts, checked once its shape is sound:
//! names, references between resources, jobs and groups, artifacts, and
//! cycles of `passed`. Messages follow Concourse's `configvalidate`.
//!
//! Every check is linear in the config's size: names are looked up in hash
//! maps, and only glob patterns are matched against every job, a work
//! bounded by [`MAX_GLOB_WORK`].

use std::collections::{HashMap, HashSet};

use super::glob::{is_pattern, Glob};
use super::names::{check, show, Verdict};
use super::steps::{Action, Step};
use super::{ConfigError, ConfigWarning, Job, PipelineConfig, MAX_GLOB_WORK, VAR_SOURCE_TYPES};

pub(super) struct Validator<'c> {
    config: &'c PipelineConfig,
    errors: &'c mut Vec<ConfigError>,
    warnings: &'c mut Vec<ConfigWarning>,
    jobs: HashMap<&'c str, usize>,
    resources: HashSet<&'c str>,
    /// Per job, the resources its gets and puts use.
    touches: Vec<HashSet<&'c str>>,
    /// Per job, the jobs its `passed` name.
    upstream: Vec<Vec<usize>>,
    globs_allowed: bool,
    /// Glob matches done, for tests of the bound.
    pub(super) glob_matches: usize,
}

pub(super) fn validate(
    config: &PipelineConfig,
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<ConfigWarning>,
) {
    let mut v = Validator::new(config, errors, warnings);
    v.run();
}

impl<'c> Validator<'c> {
    pub(super) fn new(
        config: &'c PipelineConfig,
        errors: &'c mut Vec<ConfigError>,
        warnings: &'c mut Vec<ConfigWarning>,
    ) -> Self {
        let mut jobs = HashMap::with_capacity(config.jobs.len());
        for (i, j) in config.jobs.iter().enumerate() {
            jobs.entry(j.name.as_str()).or_insert(i);
        }
        let touches = config
            .jobs
            .iter()
            .map(|j| {
                let mut set = HashSet::new();
                for_each_step(j, &mut |_, step| match &step.action {
                    Action::Get(g) => {
                        set.insert(g.resource_name());
                    }
                    Action::Put(p) => {
                        set.insert(p.resource_name());
                    }
                    _ => {}
                });
                set
            })
            .collect();
        Validator {
            config,
            errors,
            warnings,
            jobs,
            resources: config.resources.iter().map(|r| r.name.as_str()).collect(),
            touches,
            upstream: vec![vec![]; config.jobs.len()],
            globs_allowed: true,
            glob_matches: 0,
        }
    }

    pub(super) fn run(&mut self) {
        self.glob_budget();
        self.groups();
        self.resources();
        self.resource_types();
        self.var_sources();
        self.var_source_order();
        self.jobs();
        self.display();
        self.cycles();
    }

    fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError {
            path: path.into(),
            message: message.into(),
        });
    }

    fn warn(&mut self, kind: &str, message: String) {
        self.warnings.push(ConfigWarning {
            kind: kind.into(),
            message,
        });
    }

    /// Concourse's identifier rule, with hangar's refusals of names unsafe
    /// as path segments. `context` is where the name is.
    fn identifier(&mut self, name: &str, context: &str) {
        match check(name) {
            Verdict::Valid => {}
            Verdict::Warn(reason) => self.warn(
                "invalid_identifier",
                format!(
                    "{context}: '{}' is not a valid identifier: {reason}",
                    show(name)
                ),
            ),
            Verdict::Refuse(reason) if name.is_empty() => self.err(context, reason),
            Verdict::Refuse(reason) => self.err(
                context,
                format!("'{}' is not a valid identifier: {reason}", show(name)),
            ),
        }
    }

    /// Names of one section: valid, and each once.
    fn section_names<'n>(&mut self, section: &str, names: impl Iterator<Item = &'n str>) {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, name) in names.enumerate() {
            if name.is_empty() {
                // Reading already said it has no name.
                continue;
            }
            self.identifier(name, &format!("{section}.{}", show(name)));
            if let Some(first) = seen.get(name) {
                self.err(
                    section,
                    format!(
                        "{section}[{first}] and {section}[{i}] have the same name ('{}')",
                        show(name)
                    ),
                );
            } else {
                seen.insert(name, i);
            }
        }
    }

    fn glob_budget(&mut self) {
        let patterns = self
            .config
            .groups
            .iter()
            .flat_map(|g| g.jobs.iter())
            .filter(|p| is_pattern(p))
            .count()
            + self
                .config
                .jobs
                .iter()
                .map(|j| {
                    let mut n = 0;
                    for_each_step(j, &mut |_, s| {
                        if let Action::Get(g) = &s.action {
                            n += g.passed.iter().filter(|p| is_pattern(p)).count();
                        }
                    });
                    n
                })
                .sum::<usize>();
        if patterns.saturating_mul(self.config.jobs.len()) > MAX_GLOB_WORK {
            self.globs_allowed = false;
            self.err(
                "",
                format!(
                    "{patterns} glob patterns in passed and groups, each matched against {} \
                     jobs, is more than {MAX_GLOB_WORK} matches; name the jobs instead",
                    self.config.jobs.len()
                ),
            );
        }
    }

    /// The jobs a name or pattern matches, in config order; Err for a bad
    /// pattern.
    fn matching_jobs(&mut self, pattern: &str, braces: bool) -> Result<Vec<usize>, String> {
        if !is_pattern(pattern) {
            return Ok(self.jobs.get(pattern).copied().into_iter().collect());
        }
        let glob = if braces {
            Glob::compile_with_braces(pattern)?
        } else {
            Glob::compile(pattern)?
        };
        if !self.globs_allowed {
            return Ok(vec![]);
        }
        self.glob_matches += self.config.jobs.len();
        Ok(self
            .config
            .jobs
            .iter()
            .enumerate()
            .filter(|(_, j)| glob.matches(&j.name))
            .map(|(i, _)| i)
            .collect())
    }

    fn groups(&mut self) {
        let config = self.config;
        let mut counts: Vec<(&str, usize)> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        let mut grouped = vec![false; config.jobs.len()];
        for group in &config.groups {
            let at = format!("groups.{}", show(&group.name));
            if !group.name.is_empty() {
                self.identifier(&group.name, &at);
                match index.get(group.name.as_str()) {
                    Some(&i) => counts[i].1 += 1,
                    None => {
                        index.insert(&group.name, counts.len());
                        counts.push((&group.name, 1));
                    }
                }
            }
            for pattern in &group.jobs {
                match self.matching_jobs(pattern, true) {
                    Err(why) => self.err(
                        &at,
                        format!(
                            "invalid glob expression '{}' for group '{}': {why}",
                            show(pattern),
                            show(&group.name)
                        ),
                    ),
                    Ok(matched) if matched.is_empty() && self.globs_allowed => self.err(
                        &at,
                        format!(
                            "no jobs match '{}' for group '{}'",
                            show(pattern),
                            show(&group.name)
                        ),
                    ),
                    Ok(matched) => matched.into_iter().for_each(|i| grouped[i] = true),
                }
            }
            for resource in &group.resources {
                if !self.resources.contains(resource.as_str()) {
                    self.err(
                        &at,
                        format!(
                            "group '{}' has unknown resource '{}'",
                            show(&group.name),
                            show(resource)
                        ),
                    );
                }
            }
        }
        for (name, count) in counts {
            if count > 1 {
                self.err(
                    "groups",
                    format!(
                        "group '{}' appears {count} times. Duplicate names are not allowed.",
                        show(name)
                    ),
                );
            }
        }
        if !config.groups.is_empty() && self.globs_allowed {
            for (job, grouped) in config.jobs.iter().zip(grouped) {
                if !grouped {
                    self.err(
                        "groups",
                        format!("job '{}' belongs to no group", show(&job.name)),
                    );
                }
            }
        }
    }

    fn resources(&mut self) {
        let config = self.config;
        self.section_names(
            "resources",
            config.resources.iter().map(|r| r.name.as_str()),
        );
        let used: HashSet<&str> = self.touches.iter().flatten().copied().collect();
        let types: Vec<_> = config
            .resource_types
            .iter()
            .map(|t| t.to_build_type())
            .collect();
        for r in &config.resources {
            let at = format!("resources.{}", show(&r.name));
            if !r.name.is_empty() && !used.contains(r.name.as_str()) {
                self.err(&at, format!("resource '{}' is not used", show(&r.name)));
            }
            if let Err(e) = crate::resource_types::chain(&types, &r.resource_type) {
                self.err(format!("{at}.type"), e.0);
            }
        }
    }

    fn resource_types(&mut self) {
        let config = self.config;
        self.section_names(
            "resource_types",
            config.resource_types.iter().map(|t| t.name.as_str()),
        );
        let types: Vec<_> = config
            .resource_types
            .iter()
            .map(|t| t.to_build_type())
            .collect();
        for t in &config.resource_types {
            if let Err(e) = crate::resource_types::chain(&types, &t.name) {
                self.err(format!("resource_types.{}", show(&t.name)), e.0);
            }
        }
    }

    fn var_sources(&mut self) {
        let config = self.config;
        self.section_names(
            "var_sources",
            config.var_sources.iter().map(|v| v.name.as_str()),
        );
        for v in &config.var_sources {
            let at = format!("var_sources.{}", show(&v.name));
            if !v.source_type.is_empty() && !VAR_SOURCE_TYPES.contains(&v.source_type.as_str()) {
                self.err(
                    &at,
                    format!(
                        "unknown credential manager type: {} (a pipeline takes {})",
                        show(&v.source_type),
                        VAR_SOURCE_TYPES.join(", ")
                    ),
                );
            } else if let Err(e) = crate::vars::var_sources::check_type(&v.source_type) {
                self.err(&at, e);
            } else if let Err(e) = crate::vars::var_sources::check_dummy_config(&v.config) {
                if v.config.is_object() {
                    self.err(format!("{at}.config"), e);
                }
            }
            if !v.config.is_object() {
                self.err(
                    format!("{at}.config"),
                    format!(
                        "expected the credential manager's config (a mapping), got {}",
                        super::read::kind(&v.config)
                    ),
                );
            }
        }
    }

    /// A var source's config may read vars of other var sources
    /// (`((other:path))`); they must resolve in some order, as Concourse
    /// orders them.
    fn var_source_order(&mut self) {
        let sources = &self.config.var_sources;
        let deps: Vec<Vec<String>> = sources
            .iter()
            .map(|v| {
                crate::vars::find_unresolved(&v.config)
                    .iter()
                    .filter_map(|text| crate::vars::VarRef::parse(text).ok()?.source)
                    .collect()
            })
            .collect();
        let mut resolved = vec![false; sources.len()];
        let mut names: HashSet<&str> = HashSet::new();
        // At most one pass per var source, each over at most
        // MAX_VAR_SOURCES entries.
        loop {
            let mut progress = false;
            for (i, v) in sources.iter().enumerate() {
                if !resolved[i] && deps[i].iter().all(|d| names.contains(d.as_str())) {
                    resolved[i] = true;
                    names.insert(&v.name);
                    progress = true;
                }
            }
            if !progress {
                break;
            }
        }
        let pending: Vec<String> = sources
            .iter()
            .zip(&resolved)
            .filter(|(_, r)| !**r)
            .map(|(v, _)| show(&v.name))
            .collect();
        if pending.is_empty() {
            if let Err(e) = crate::vars::var_sources::check_chain(sources) {
                self.err("var_sources", e);
            }
        } else {
            self.err(
                "var_sources",
                format!(
                    "failed to order by dependency: could not resolve inter-dependent var \
                     sources: {}",
                    pending.join(", ")
                ),
            );
        }
    }

    fn jobs(&mut self) {
        let config = self.config;
        if config.jobs.is_empty() {
            self.err("jobs", "pipeline must contain at least one job");
            return;
        }
        self.section_names("jobs", config.jobs.iter().map(|j| j.name.as_str()));
        for (index, job) in config.jobs.iter().enumerate() {
            let at = if job.name.is_empty() {
                format!("jobs[{index}]")
            } else {
                format!("jobs.{}", show(&job.name))
            };
            self.job_settings(job, &at);
            self.job_steps(index, job, &at);
        }
    }

    fn job_settings(&mut self, job: &Job, at: &str) {
        if job.build_logs_to_retain.is_some() {
            self.warn(
                "deprecated_field",
                format!(
                    "{at}.build_logs_to_retain is deprecated. Use build_log_retention instead."
                ),
            );
            if job.build_log_retention.is_some() {
                self.err(
                    at,
                    "can't use both build_log_retention and build_logs_to_retain",
                );
            }
        }
        if let Some(r) = &job.build_log_retention {
            if r.builds > 0 && r.minimum_succeeded_builds > r.builds {
                self.err(
                    at,
                    format!(
                        "has build_log_retention.minimum_succeeded_builds: {} greater than \
                         build_log_retention.builds: {}",
                        r.minimum_succeeded_builds, r.builds
                    ),
                );
            }
        }
        if job.max_in_flight.is_some() && (job.serial || !job.serial_groups.is_empty()) {
            let why = if job.serial {
                "serial"
            } else {
                "serial_groups"
            };
            self.warn(
                "pipeline",
                format!(
                    "{at}: max_in_flight is ignored: {why} runs one build of the job at a time"
                ),
            );
        }
        for (i, group) in job.serial_groups.iter().enumerate() {
            if group.is_empty() {
                self.err(format!("{at}.serial_groups[{i}]"), "must not be empty");
            }
        }
        if job.plan.is_empty() {
            self.err(
                format!("{at}.plan"),
                "a job needs at least one step (Concourse would run builds that do nothing)",
            );
        }
    }

    fn job_steps(&mut self, index: usize, job: &'c Job, at: &str) {
        let mut steps: Vec<(String, &'c Step)> = Vec::new();
        for_each_step(job, &mut |path, step| {
            steps.push((format!("{at}{path}"), step))
        });

        let mut produced: HashSet<String> = HashSet::new();
        // A task from a file has outputs known only when it runs.
        let mut outputs_known = true;
        for (_, step) in &steps {
            match &step.action {
                Action::Get(g) => {
                    produced.insert(g.name.clone());
                }
                Action::Put(p) if !p.no_get => {
                    produced.insert(p.name.clone());
                }
                Action::Task(t) => match t.parse_config() {
                    Some(Ok(config)) => {
                        for o in config.outputs {
                            let name = t.output_mapping.get(&o.name).cloned().unwrap_or(o.name);
                            produced.insert(name);
                        }
                    }
                    _ => outputs_known = false,
                },
                _ => {}
            }
        }

        let mut get_names: HashSet<&str> = HashSet::new();
        let mut local_vars: HashSet<&str> = HashSet::new();
        for (path, step) in &steps {
            let here = format!("{path}{}", step.label());
            match &step.action {
                Action::Get(g) => {
                    self.identifier(&g.name, &here);
                    if !get_names.insert(&g.name) {
                        self.err(&here, "repeated name");
                    }
                    let resource = g.resource_name();
                    if !self.resources.contains(resource) {
                        self.err(&here, format!("unknown resource '{}'", show(resource)));
                    }
                    self.passed(index, &g.passed, resource, &here);
                }
                Action::Put(p) => {
                    self.identifier(&p.name, &here);
                    let resource = p.resource_name();
                    if !self.resources.contains(resource) {
                        self.err(&here, format!("unknown resource '{}'", show(resource)));
                    }
                    if let Some(super::PutInputs::Names(names)) = &p.inputs {
                        for name in names {
                            self.artifact(
                                name,
                                &produced,
                                outputs_known,
                                &format!("{here}.inputs"),
                            );
                        }
                    }
                }
                Action::Task(t) => {
                    self.identifier(&t.name, &here);
                    match (&t.config, &t.file) {
                        (None, None) => self.err(&here, "must specify either `file:` or `config:`"),
                        (Some(_), Some(_)) => {
                            self.err(&here, "must specify one of `file:` or `config:`, not both")
                        }
                        _ => {}
                    }
                    for (field, mapping) in [
                        ("input_mapping", &t.input_mapping),
                        ("output_mapping", &t.output_mapping),
                    ] {
                        for (k, v) in mapping {
                            let at = format!("{here}.{field}");
                            self.artifact_name(k, &at);
                            self.artifact_name(v, &at);
                        }
                    }
                    if let Some(file) = &t.file {
                        self.file_artifact(file, &produced, outputs_known, &format!("{here}.file"));
                    }
                    if let Some(image) = &t.image {
                        self.artifact(image, &produced, outputs_known, &format!("{here}.image"));
                    }
                    if let Some(Ok(config)) = t.parse_config() {
                        if t.image.is_some()
                            && (config.image_resource.is_some() || config.rootfs_uri.is_some())
                        {
                            self.warn(
                                "pipeline",
                                format!(
                                    "{here}: specifies image: on the step but also specifies an \
                                     image under config: - the image: on the step takes precedence"
                                ),
                            );
                        }
                        for input in config.inputs.iter().filter(|i| !i.optional) {
                            let name = t.input_mapping.get(&input.name).unwrap_or(&input.name);
                            self.artifact(
                                name,
                                &produced,
                                outputs_known,
                                &format!("{here}.config.inputs"),
                            );
                        }
                    }
                }
                Action::SetPipeline(s) => {
                    self.identifier(&s.name, &here);
                    if let Some(team) = &s.team {
                        // A team name is a URL segment, as a pipeline's.
                        self.identifier(team, &format!("{here}.team"));
                    }
                    if s.file.is_empty() {
                        self.err(&here, "no file specified");
                    } else {
                        self.file_artifact(
                            &s.file,
                            &produced,
                            outputs_known,
                            &format!("{here}.file"),
                        );
                    }
                    for f in &s.var_files {
                        self.file_artifact(
                            f,
                            &produced,
                            outputs_known,
                            &format!("{here}.var_files"),
                        );
                    }
                }
                Action::LoadVar(l) => {
                    self.identifier(&l.name, &here);
                    if !local_vars.insert(&l.name) {
                        self.err(&here, "repeated var name");
                    }
                    if l.file.is_empty() {
                        self.err(&here, "no file specified");
                    } else {
                        self.file_artifact(
                            &l.file,
                            &produced,
                            outputs_known,
                            &format!("{here}.file"),
                        );
                    }
                }
                Action::InParallel(_) | Action::Do(_) | Action::Try(_) | Action::Across(_) => {}
            }
        }
    }

    /// Artifact names become directory names: those unsafe as one are
    /// refused, as step names are.
    fn artifact_name(&mut self, name: &str, at: &str) {
        if let Verdict::Refuse(reason) = check(name) {
            self.err(
                at,
                format!("'{}' is not a valid artifact name: {reason}", show(name)),
            );
        }
    }

    /// An artifact a step reads must be one some step of the job produces.
    fn artifact(&mut self, name: &str, produced: &HashSet<String>, known: bool, at: &str) {
        self.artifact_name(name, at);
        if known && !name.contains("((") && !produced.contains(name) {
            self.err(
                at,
                format!(
                    "no step of the job produces the artifact '{}' (Concourse would fail the \
                     build when the step runs)",
                    show(name)
                ),
            );
        }
    }

    /// A file is `artifact/path`.
    fn file_artifact(&mut self, file: &str, produced: &HashSet<String>, known: bool, at: &str) {
        match file.split_once('/') {
            Some((artifact, rest)) if !artifact.is_empty() && !rest.is_empty() => {
                self.artifact(artifact, produced, known, at)
            }
            _ if file.contains("((") => {}
            _ => self.err(
                at,
                format!(
                    "'{}' is not a file of an artifact (artifact/path/to/file)",
                    show(file)
                ),
            ),
        }
    }

    fn passed(&mut self, job: usize, passed: &[String], resource: &str, at: &str) {
        let at = format!("{at}.passed");
        for pattern in passed {
            let matched = match self.matching_jobs(pattern, false) {
                Ok(m) => m,
                Err(why) => {
                    self.err(
                        &at,
                        format!("invalid glob expression '{}': {why}", show(pattern)),
                    );
                    continue;
                }
            };
            if matched.is_empty() && self.globs_allowed {
                self.err(&at, format!("no matching job(s) for '{}'", show(pattern)));
            }
            for other in matched {
                if !self.touches[other].contains(resource) {
                    self.err(
                        &at,
                        format!(
                            "job '{}' does not interact with resource '{}'",
                            show(&self.config.jobs[other].name),
                            show(resource)
                        ),
                    );
                }
                self.upstream[job].push(other);
            }
        }
    }

    fn display(&mut self) {
        let Some(image) = self
            .config
            .display
            .as_ref()
            .and_then(|d| d.background_image.as_deref())
        else {
            return;
        };
        if image.chars().any(|c| c.is_control() || c == ' ') {
            self.err(
                "display",
                format!("background_image is not a valid URL: {}", show(image)),
            );
            return;
        }
        // A scheme is letters, digits, `+`, `-`, `.` before the first `:`,
        // starting with a letter; anything else is a relative URL.
        let scheme = image.split_once(':').map(|(s, _)| s).filter(|s| {
            s.starts_with(|c: char| c.is_ascii_alphabetic())
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        });
        if let Some(scheme) = scheme {
            if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
                self.err(
                    "display",
                    "background_image scheme must be either http, https or relative",
                );
            }
        }
    }

    /// A job whose `passed` leads back to itself can never run.
    fn cycles(&mut self) {
        const UNSEEN: u8 = 0;
        const OPEN: u8 = 1;
        const DONE: u8 = 2;
        let mut state = vec![UNSEEN; self.config.jobs.len()];
        for root in 0..self.config.jobs.len() {
            if state[root] != UNSEEN {
                continue;
            }
            // Iterative, so that a long chain of jobs cannot overflow the
            // stack.
            let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
            state[root] = OPEN;
            while let Some(&mut (job, ref mut next)) = stack.last_mut() {
                if let Some(&up) = self.upstream[job].get(*next) {
                    *next += 1;
                    match state[up] {
                        UNSEEN => {
                            state[up] = OPEN;
                            stack.push((up, 0));
                        }
                        OPEN => {
                            let name = show(&self.config.jobs[up].name);
                            self.err(
                                "jobs",
                                format!("pipeline contains a cycle that starts at Job '{name}'"),
                            );
                            return;
                        }
                        _ => {}
                    }
                } else {
                    state[job] = DONE;
                    stack.pop();
                }
            }
        }
    }
}

/// Every step of a job, hooks included, with its location relative to the
/// job (`.plan.do[0]`, `.plan.on_success`).
pub(super) fn for_each_step<'j>(job: &'j Job, f: &mut dyn FnMut(&str, &'j Step)) {
    for (i, step) in job.plan.iter().enumerate() {
        step.walk(&format!(".plan.do[{i}]"), f);
    }
    for (key, hook) in job.hooks() {
        if let Some(h) = hook {
            h.walk(&format!(".plan.{key}"), f);
        }
    }
}
