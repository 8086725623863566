//! The roles of a team and what each API action needs, as Concourse's
//! `atc/api/accessor` and `atc/wrappa/api_auth_wrappa.go` define them.

use std::fmt;

/// A role on one team. Ordered: each role may do what the ones below it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    Viewer,
    PipelineOperator,
    Member,
    Owner,
}

impl Role {
    pub const ALL: [Role; 4] = [
        Role::Viewer,
        Role::PipelineOperator,
        Role::Member,
        Role::Owner,
    ];

    /// Concourse's name of the role.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::PipelineOperator => "pipeline-operator",
            Role::Member => "member",
            Role::Owner => "owner",
        }
    }

    pub fn parse(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == name)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who may call an action, before the team's roles are looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone, logged in or not (`/info`, logging in; a webhook proves
    /// itself with its own token).
    Public,
    /// Any logged-in user (`userinfo`, logging out).
    Authenticated,
    /// A user with a role on at least one team (listing workers).
    AnyTeam,
    /// The team's role at least this, or an admin.
    Team(Role),
    /// Reading a pipeline: anyone when it is exposed, else a viewer of its
    /// team (or an admin).
    PipelineRead,
    /// Only an admin: an owner of the main team, or the admin token.
    Admin,
}

/// An action as a type, so a route names its action in its signature
/// (web's `Allowed<act::SaveConfig>`).
pub trait ActionOf {
    const ACTION: Action;
}

/// Declares [`Action`], [`Action::ALL`] and a type per action in [`act`]
/// from one list, so the table tests cover every action there is.
macro_rules! actions {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// Every action of hangar's API a user calls (a worker's own routes
        /// are checked by its credentials, not by roles).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Action {
            $($(#[$doc])* $name,)*
        }

        impl Action {
            /// Every action, for the table tests.
            pub const ALL: &'static [Action] = &[$(Action::$name,)*];
        }

        /// One type per [`Action`], of the same name.
        pub mod act {
            $(
                pub struct $name;
                impl super::ActionOf for $name {
                    const ACTION: super::Action = super::Action::$name;
                }
            )*
        }
    };
}

actions! {
    GetInfo,
    Login,
    GetUser,
    Logout,
    ListTeams,
    GetTeam,
    /// Setting an existing team's auth; creating a team is [`Access::Admin`]
    /// (see [`Action::CreateTeam`]).
    SetTeam,
    CreateTeam,
    RenameTeam,
    DestroyTeam,
    ListPipelines,
    GetPipeline,
    GetConfig,
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
    /// A process in a step's container (`intercept`, fly's `hijack`).
    InterceptContainer,
    PausePipeline,
    UnpausePipeline,
    ListJobs,
    GetJob,
    PauseJob,
    UnpauseJob,
    ListJobBuilds,
    GetJobBuild,
    CreateJobBuild,
    RerunJobBuild,
    ListJobInputs,
    ListResources,
    ListResourceVersions,
    CheckResource,
    CheckResourceType,
    GetCheck,
    CheckResourceWebHook,
    GetPin,
    PinResourceVersion,
    UnpinResource,
    EnableResourceVersion,
    DisableResourceVersion,
    /// A one-off build (`execute`).
    CreateBuild,
    ListBuilds,
    GetBuild,
    BuildEvents,
    AbortBuild,
    GetBuildArtifact,
    CreateArtifact,
    ListWorkers,
    GetWorker,
    LandWorker,
    RetireWorker,
    PruneWorker,
    PruneStalledWorkers,
    ListEvents,
    ListVolumes,
    GetVolume,
    CreateVolume,
    DestroyVolume,
}

impl Action {
    /// What the action needs: Concourse's required role where Concourse
    /// has the action; the differences are marked.
    pub fn access(self) -> Access {
        use Action::*;
        use Role::*;
        match self {
            GetInfo | Login | CheckResourceWebHook => Access::Public,
            GetUser | Logout => Access::Authenticated,
            // Concourse lists the teams a caller has a role on, and none to
            // a stranger: the listing is filtered, not refused.
            ListTeams => Access::Authenticated,
            GetTeam => Access::Team(Viewer),
            SetTeam | RenameTeam => Access::Team(Owner),
            CreateTeam | DestroyTeam => Access::Admin,
            // Filtered to the exposed pipelines for a stranger.
            ListPipelines => Access::PipelineRead,
            GetPipeline | ListJobs | GetJob | ListJobBuilds | GetJobBuild | ListResources
            | ListResourceVersions | GetCheck | GetPin => Access::PipelineRead,
            GetConfig | ListJobInputs => Access::Team(Viewer),
            SaveConfig | DeletePipeline | RenamePipeline | ExposePipeline | HidePipeline
            | ArchivePipeline | OrderPipelines | ClearTaskCache | ClearResourceCache => {
                Access::Team(Member)
            }
            // As Concourse's ListContainers and HijackContainer: a
            // container holds the build's inputs and its secrets' values.
            ListContainers | InterceptContainer => Access::Team(Member),
            PausePipeline
            | UnpausePipeline
            | PauseJob
            | UnpauseJob
            | CreateJobBuild
            | RerunJobBuild
            | CheckResource
            | CheckResourceType
            | PinResourceVersion
            | UnpinResource
            | EnableResourceVersion
            | DisableResourceVersion => Access::Team(PipelineOperator),
            CreateBuild | CreateArtifact => Access::Team(Member),
            // As Concourse's GetArtifact: an artifact may hold more than
            // the build's log shows, so a viewer does not get it.
            GetBuildArtifact => Access::Team(Member),
            ListBuilds => Access::Authenticated,
            GetBuild | BuildEvents => Access::PipelineRead,
            AbortBuild => Access::Team(PipelineOperator),
            ListWorkers | GetWorker => Access::AnyTeam,
            // hangar differs: Concourse lets a team's member land or prune
            // the team's own workers; hangar has no team workers yet, so
            // these stay with the admins who run the fleet.
            LandWorker | RetireWorker | PruneWorker | PruneStalledWorkers => Access::Admin,
            // Worker lifecycle events and raw volumes are the fleet's, not a
            // team's (Concourse has neither route).
            ListEvents | ListVolumes | GetVolume | CreateVolume | DestroyVolume => Access::Admin,
        }
    }
}
