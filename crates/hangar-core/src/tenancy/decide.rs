//! Whether a caller may do an action: the one decision every route's check
//! makes, from the caller, the action's [`Access`] and the team the route
//! names.
//!
//! What a refusal tells is part of the decision: a stranger is told to log
//! in (401) before anything is looked up, so a missing team and a private
//! one answer alike; a private pipeline reads as missing (404) to whoever
//! may not see it; a logged-in user without the role is told which role
//! the action needs (403).

use std::collections::BTreeMap;

use super::roles::{Access, Action, Role};

/// A logged-in user, as a connector names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `local` or `oidc`.
    pub connector: String,
    /// The connector's stable id (an OIDC subject; a local user's name).
    pub user_id: String,
    /// The name shown and matched (a local user's name; an OIDC
    /// `preferred_username` or email).
    pub user_name: String,
    /// The connector's groups (OIDC's groups claim).
    pub groups: Vec<String>,
}

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    Anonymous,
    /// The admin token web was started with: for bootstrap and automation.
    AdminToken,
    User {
        identity: Identity,
        /// The caller's role on each team that gives them one.
        roles: BTreeMap<String, Role>,
    },
}

impl Caller {
    /// An owner of the main team, or the admin token, is an admin.
    pub fn is_admin(&self) -> bool {
        match self {
            Caller::Anonymous => false,
            Caller::AdminToken => true,
            Caller::User { roles, .. } => roles.get(super::MAIN_TEAM) == Some(&Role::Owner),
        }
    }

    /// The caller's role on `team`; an admin counts as its owner.
    pub fn role_on(&self, team: &str) -> Option<Role> {
        if self.is_admin() {
            return Some(Role::Owner);
        }
        match self {
            Caller::User { roles, .. } => roles.get(team).copied(),
            _ => None,
        }
    }

    /// Who did something, in the words events record.
    pub fn describe(&self) -> String {
        match self {
            Caller::Anonymous => "an anonymous caller".into(),
            Caller::AdminToken => "an operator (admin token)".into(),
            Caller::User { identity, .. } => {
                format!("user {}:{}", identity.connector, identity.user_name)
            }
        }
    }
}

/// What the action is done to.
#[derive(Debug, Clone, Copy, Default)]
pub struct Target<'a> {
    /// The team the route names (or the build's, the pipeline's).
    pub team: Option<&'a str>,
    /// The pipeline is exposed: anyone may read it.
    pub exposed: bool,
}

impl<'a> Target<'a> {
    pub fn none() -> Target<'static> {
        Target::default()
    }

    pub fn team(team: &'a str) -> Target<'a> {
        Target {
            team: Some(team),
            exposed: false,
        }
    }

    pub fn pipeline(team: &'a str, exposed: bool) -> Target<'a> {
        Target {
            team: Some(team),
            exposed,
        }
    }
}

/// Why an action is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// No one is logged in: 401.
    Unauthenticated,
    /// Logged in, without the role: 403, saying what is needed.
    Forbidden(String),
    /// Answered as if the thing did not exist: 404.
    Hidden,
}

/// May `caller` do `action` to `target`?
pub fn decide(caller: &Caller, action: Action, target: Target<'_>) -> Result<(), Denied> {
    let access = action.access();
    if access == Access::Public || caller.is_admin() {
        return Ok(());
    }
    let roles = match caller {
        Caller::Anonymous => {
            return match access {
                Access::PipelineRead if target.exposed => Ok(()),
                Access::PipelineRead if target.team.is_some() => Err(Denied::Hidden),
                _ => Err(Denied::Unauthenticated),
            }
        }
        Caller::AdminToken => return Ok(()),
        Caller::User { roles, .. } => roles,
    };
    let team_role = |needed: Role| -> Result<(), Denied> {
        let Some(team) = target.team else {
            return Err(Denied::Forbidden(format!(
                "this needs the {needed} role on a team, and names none"
            )));
        };
        match roles.get(team) {
            Some(role) if *role >= needed => Ok(()),
            Some(role) => Err(Denied::Forbidden(format!(
                "this needs the {needed} role on team {team}; you are a {role} there"
            ))),
            None => Err(Denied::Forbidden(format!(
                "this needs the {needed} role on team {team}; you have no role there"
            ))),
        }
    };
    match access {
        Access::Public | Access::Authenticated => Ok(()),
        Access::AnyTeam if roles.is_empty() => Err(Denied::Forbidden(
            "this needs a role on at least one team; you have none".into(),
        )),
        Access::AnyTeam => Ok(()),
        Access::Team(needed) => team_role(needed),
        Access::PipelineRead if target.exposed => Ok(()),
        Access::PipelineRead => match target.team {
            Some(team) if roles.contains_key(team) => Ok(()),
            Some(_) => Err(Denied::Hidden),
            None => team_role(Role::Viewer),
        },
        Access::Admin => Err(Denied::Forbidden(
            "only an admin (an owner of team main) may do this".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(roles: &[(&str, Role)]) -> Caller {
        Caller::User {
            identity: Identity {
                connector: "local".into(),
                user_id: "u".into(),
                user_name: "u".into(),
                groups: vec![],
            },
            roles: roles.iter().map(|(t, r)| (t.to_string(), *r)).collect(),
        }
    }

    /// The heart of the roles × actions table: for each role on team `a`,
    /// which actions on team `a` are allowed; the role on team `b` never
    /// helps; admins may do all.
    #[test]
    fn each_role_may_do_what_concourse_gives_it_on_its_own_team_only() {
        use Action::*;
        // The actions the lowest role allowed to do them, per Concourse.
        let owner_only = [SetTeam, RenameTeam];
        let member_up = [
            SaveConfig,
            DeletePipeline,
            RenamePipeline,
            ExposePipeline,
            HidePipeline,
            ArchivePipeline,
            OrderPipelines,
            ClearTaskCache,
            ClearResourceCache,
            ListContainers,
            InterceptContainer,
            CreateBuild,
            CreateArtifact,
            GetBuildArtifact,
        ];
        let operator_up = [
            PausePipeline,
            UnpausePipeline,
            PauseJob,
            UnpauseJob,
            CreateJobBuild,
            RerunJobBuild,
            CheckResource,
            CheckResourceType,
            PinResourceVersion,
            UnpinResource,
            EnableResourceVersion,
            DisableResourceVersion,
            AbortBuild,
        ];
        let viewer_up = [
            GetTeam,
            GetConfig,
            ListJobInputs,
            ListPipelines,
            GetPipeline,
            ListJobs,
            GetJob,
            ListJobBuilds,
            GetJobBuild,
            ListResources,
            ListResourceVersions,
            GetCheck,
            GetPin,
            GetBuild,
            BuildEvents,
        ];
        let anyone_logged_in = [
            GetInfo,
            Login,
            CheckResourceWebHook,
            GetUser,
            Logout,
            ListTeams,
            ListBuilds,
            ListWorkers,
            GetWorker,
        ];
        let admin_only = [
            CreateTeam,
            DestroyTeam,
            LandWorker,
            RetireWorker,
            PruneWorker,
            PruneStalledWorkers,
            ListEvents,
            ListVolumes,
            GetVolume,
            CreateVolume,
            DestroyVolume,
        ];
        let listed: Vec<Action> = [
            &owner_only[..],
            &member_up,
            &operator_up,
            &viewer_up,
            &anyone_logged_in,
            &admin_only,
        ]
        .concat();
        for a in Action::ALL {
            assert_eq!(
                listed.iter().filter(|l| *l == a).count(),
                1,
                "{a:?} is in the table once"
            );
        }
        let lowest = |a: Action| -> Option<Option<Role>> {
            if owner_only.contains(&a) {
                Some(Some(Role::Owner))
            } else if member_up.contains(&a) {
                Some(Some(Role::Member))
            } else if operator_up.contains(&a) {
                Some(Some(Role::PipelineOperator))
            } else if viewer_up.contains(&a) {
                Some(Some(Role::Viewer))
            } else if anyone_logged_in.contains(&a) {
                Some(None)
            } else {
                None
            }
        };
        for &action in Action::ALL {
            for role in Role::ALL {
                let on_a = user(&[("a", role)]);
                let on_b = user(&[("b", role)]);
                let allowed = decide(&on_a, action, Target::team("a")).is_ok();
                let expected = match lowest(action) {
                    Some(Some(needed)) => role >= needed,
                    Some(None) => true,
                    None => false,
                };
                assert_eq!(allowed, expected, "{role} on a, {action:?} on a");
                let elsewhere = decide(&on_b, action, Target::team("a")).is_ok();
                assert_eq!(
                    elsewhere,
                    matches!(lowest(action), Some(None)),
                    "{role} on b, {action:?} on a"
                );
                let main_owner = user(&[("main", Role::Owner)]);
                assert!(decide(&main_owner, action, Target::team("a")).is_ok());
                assert!(decide(&Caller::AdminToken, action, Target::team("a")).is_ok());
            }
        }
    }

    #[test]
    fn a_stranger_is_asked_to_log_in_and_sees_only_exposed_pipelines() {
        use Action::*;
        let cases = [
            (GetInfo, Target::none(), Ok(())),
            (Login, Target::none(), Ok(())),
            (CheckResourceWebHook, Target::team("a"), Ok(())),
            (GetPipeline, Target::pipeline("a", true), Ok(())),
            (
                GetPipeline,
                Target::pipeline("a", false),
                Err(Denied::Hidden),
            ),
            (ListJobs, Target::pipeline("a", false), Err(Denied::Hidden)),
            (
                GetConfig,
                Target::pipeline("a", true),
                Err(Denied::Unauthenticated),
            ),
            (
                PausePipeline,
                Target::pipeline("a", true),
                Err(Denied::Unauthenticated),
            ),
            (GetUser, Target::none(), Err(Denied::Unauthenticated)),
            (ListWorkers, Target::none(), Err(Denied::Unauthenticated)),
            (DestroyTeam, Target::team("a"), Err(Denied::Unauthenticated)),
        ];
        for (action, target, expected) in cases {
            assert_eq!(
                decide(&Caller::Anonymous, action, target),
                expected,
                "{action:?}"
            );
        }
    }

    #[test]
    fn refusals_say_what_is_needed_and_hide_private_pipelines() {
        let viewer = user(&[("a", Role::Viewer)]);
        assert_eq!(
            decide(&viewer, Action::PausePipeline, Target::team("a")),
            Err(Denied::Forbidden(
                "this needs the pipeline-operator role on team a; you are a viewer there".into()
            ))
        );
        assert_eq!(
            decide(&viewer, Action::SaveConfig, Target::team("b")),
            Err(Denied::Forbidden(
                "this needs the member role on team b; you have no role there".into()
            ))
        );
        assert_eq!(
            decide(&viewer, Action::GetPipeline, Target::pipeline("b", false)),
            Err(Denied::Hidden)
        );
        assert!(decide(&viewer, Action::GetPipeline, Target::pipeline("b", true)).is_ok());
        assert_eq!(
            decide(&user(&[]), Action::ListWorkers, Target::none()),
            Err(Denied::Forbidden(
                "this needs a role on at least one team; you have none".into()
            ))
        );
        assert!(matches!(
            decide(&viewer, Action::DestroyTeam, Target::team("a")),
            Err(Denied::Forbidden(m)) if m.contains("only an admin")
        ));
    }

    #[test]
    fn only_an_owner_of_main_is_an_admin() {
        let cases = [
            (user(&[("main", Role::Owner)]), true),
            (user(&[("main", Role::Member)]), false),
            (user(&[("other", Role::Owner)]), false),
            (Caller::AdminToken, true),
            (Caller::Anonymous, false),
        ];
        for (caller, admin) in cases {
            assert_eq!(caller.is_admin(), admin, "{caller:?}");
        }
    }
}
