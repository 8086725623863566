//! What each side does with a field it does not know: a server refuses it
//! in a request, a client ignores it in a response.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::builds::{
    Artifact, Build, BuildEvent, BuildEventKind, BuildEvents, BuildStatus, BuildStep, CreateBuild,
    StepKind, StepState,
};
use crate::containers::{Container, ContainerExit, ContainerSpec, Mount, RunState, Runtime};
use crate::pipelines::{
    self as pl, ConfigWarning, PipelineSaved, RenamePipeline, ResourceVersion, VersionsQuery,
};
use crate::resources::{ActionEvent, ActionFailure, ResourceAction, ResourceActionResult};
use crate::{worker_api, *};

const EXTRA: &str = "field_from_a_newer_version";

/// `json` with one more field at the top.
fn with_extra(json: &str) -> String {
    let mut v: Value = serde_json::from_str(json).expect("sample is JSON");
    v.as_object_mut()
        .expect("sample is an object")
        .insert(EXTRA.into(), Value::from(1));
    v.to_string()
}

fn tolerated<T: DeserializeOwned>(name: &str, json: &str) {
    serde_json::from_str::<T>(json).unwrap_or_else(|e| panic!("{name} sample: {e}"));
    serde_json::from_str::<T>(&with_extra(json))
        .unwrap_or_else(|e| panic!("response {name} refused an unknown field: {e}"));
}

fn refused<T: DeserializeOwned + std::fmt::Debug>(name: &str, json: &str) {
    serde_json::from_str::<T>(json).unwrap_or_else(|e| panic!("{name} sample: {e}"));
    let err = serde_json::from_str::<T>(&with_extra(json))
        .expect_err(&format!("request {name} took an unknown field"));
    assert!(
        err.to_string()
            .contains(&format!("unknown field `{EXTRA}`")),
        "{name}: {err}"
    );
}

const CONDITION: &str = r#"{"pressure":"soft","pressure_reason":"memory 85%","healthy":true,
    "unhealthy_reason":null,"memory_used":1,"memory_limit":2,"memory_reserved":0,
    "disk_used":1,"disk_total":2}"#;
const RESOURCE_TYPE: &str = r#"{"type":"git","path":"/rt/git","version":null}"#;
const EVENT: &str = r#"{"id":1,"worker":"w","kind":"restarted-state-lost","cause":"c",
    "generation":2,"at":3}"#;

#[test]
fn responses_tolerate_unknown_fields() {
    tolerated::<Registered>(
        "Registered",
        r#"{"generation":1,"kind":"state-kept","heartbeat_interval_ms":null,
            "heartbeat_ttl_ms":30000,"token":"t"}"#,
    );
    tolerated::<HeartbeatAccepted>("HeartbeatAccepted", r#"{"state":"landing"}"#);
    let worker = format!(
        r#"{{"name":"w","state":"running","state_identity":"s","generation":1,
            "platform":"linux","tags":[],"team":null,"version":"1","resource_types":[],
            "ephemeral":false,"containers":0,"volumes":0,"first_registered_at":0,
            "registered_at":0,"last_heartbeat_at":0,"state_changed_at":0,"restarts":0,
            "api_url":null,"last_event":{EVENT},"last_restart":null,"condition":{CONDITION}}}"#
    );
    tolerated::<Worker>("Worker", &worker);
    tolerated::<WorkerEvent>("WorkerEvent", EVENT);
    tolerated::<CommandDone>(
        "CommandDone",
        r#"{"worker":"w","state":"removed","changed":true}"#,
    );
    tolerated::<Pruned>("Pruned", r#"{"pruned":["w"]}"#);
    tolerated::<Volume>(
        "Volume",
        r#"{"handle":"h","worker":"w","state":"created","parent":"p",
            "owner_kind":"base-resource-type","owner_id":null,"strategy":"cow",
            "size_bytes":null,"created_at":0,"missing_since":null,"last_used_at":null}"#,
    );
    tolerated::<VolumeReportAnswer>(
        "VolumeReportAnswer",
        r#"{"destroy":["a"],"destroy_containers":[]}"#,
    );
    tolerated::<worker_api::Volume>(
        "worker_api::Volume",
        r#"{"handle":"h","parent":null,"path":"/v","properties":{},"size_bytes":1,
            "created_at":0}"#,
    );
    tolerated::<Info>(
        "Info",
        r#"{"version":"1","database":{"backend":"sqlite","reachable":true,"lost":false}}"#,
    );
    tolerated::<DatabaseStatus>(
        "DatabaseStatus",
        r#"{"backend":"postgres","reachable":false}"#,
    );
    tolerated::<ErrorBody>(
        "ErrorBody",
        r#"{"error":{"code":"not_found","message":"m"}}"#,
    );
    tolerated::<ErrorDetail>("ErrorDetail", r#"{"code":"conflict","message":"m"}"#);
    let step = r#"{"step_id":"0","name":"n","kind":"task","state":"errored","attempt":1,
        "worker":null,"exit_code":null,"error":null,"started_at":null,"finished_at":null}"#;
    tolerated::<BuildStep>("BuildStep", step);
    tolerated::<Build>(
        "Build",
        &format!(
            r#"{{"id":1,"name":"b","status":"aborted","created_at":0,"started_at":null,
                "finished_at":null,"exit_code":null,"error":null,"steps":[{step}]}}"#
        ),
    );
    let event = r#"{"id":1,"step":"0","kind":"infra","payload":"p","at":0}"#;
    tolerated::<BuildEvent>("BuildEvent", event);
    tolerated::<BuildEvents>(
        "BuildEvents",
        &format!(r#"{{"events":[{event}],"status":"started","exit_code":null}}"#),
    );
    tolerated::<Artifact>("Artifact", r#"{"handle":"h","worker":"w"}"#);
    let exit = r#"{"code":0,"signal":null,"oom_killed":false,"memory_limit_bytes":null,
        "finished_at":0}"#;
    tolerated::<ContainerExit>("ContainerExit", exit);
    tolerated::<Container>(
        "Container",
        &format!(
            r#"{{"handle":"c","runtime":"runc","state":"exited","started_at":0,
                "exit":{exit},"log_bytes":0}}"#
        ),
    );
    tolerated::<ResourceActionResult>(
        "ResourceActionResult",
        r#"{"exit_code":0,"response":null,"stderr":""}"#,
    );
    tolerated::<ResourceActionResult>(
        "ResourceActionResult",
        r#"{"exit_code":75,"response":null,"stderr":"","failure":"infrastructure"}"#,
    );
}

/// A resource action's classification travels as a typed field, and a
/// streamed answer is one externally tagged event a line.
#[test]
fn an_action_s_failure_class_and_events_have_one_spelling() {
    let result = ResourceActionResult {
        exit_code: 75,
        response: None,
        stderr: String::new(),
        failure: Some(ActionFailure::Infrastructure),
    };
    let json = serde_json::to_value(&result).unwrap();
    assert_eq!(json["failure"], "infrastructure");
    assert!(result.infrastructure_failure());
    // An older worker says nothing: the program's own failure.
    let old: ResourceActionResult =
        serde_json::from_str(r#"{"exit_code":75,"response":null,"stderr":""}"#).unwrap();
    assert_eq!(old.failure, None);
    assert!(!old.infrastructure_failure());
    // Exit 0 is never a failure, whatever the field says.
    let ok = ResourceActionResult {
        exit_code: 0,
        ..result.clone()
    };
    assert!(!ok.infrastructure_failure());
    let lines = [
        (
            ActionEvent::Stderr("layer 1/2\n".into()),
            r#"{"stderr":"layer 1/2\n"}"#,
        ),
        (
            ActionEvent::Result(result),
            r#"{"result":{"exit_code":75,"response":null,"stderr":"","failure":"infrastructure"}}"#,
        ),
    ];
    for (event, line) in lines {
        assert_eq!(serde_json::to_string(&event).unwrap(), line);
        assert_eq!(serde_json::from_str::<ActionEvent>(line).unwrap(), event);
    }
}

const PIPELINE: &str = r#"{"id":1,"team":"main","name":"p","paused":true,"config_version":2,
    "created_at":1,"updated_at":2}"#;

#[test]
fn pipeline_responses_tolerate_unknown_fields() {
    tolerated::<pl::Pipeline>("Pipeline", PIPELINE);
    tolerated::<PipelineSaved>(
        "PipelineSaved",
        &format!(
            r#"{{"pipeline":{PIPELINE},"created":true,"warnings":[{{"kind":"k","message":"m"}}]}}"#
        ),
    );
    tolerated::<ConfigWarning>("ConfigWarning", r#"{"kind":"k","message":"m"}"#);
    tolerated::<pl::PipelineConfig>("PipelineConfig", r#"{"config":{"jobs":[]},"version":3}"#);
    tolerated::<pl::Job>(
        "Job",
        r#"{"id":1,"team":"main","pipeline":"p","name":"j","paused":false,"next_build_number":1}"#,
    );
    tolerated::<pl::Resource>(
        "Resource",
        r#"{"id":1,"team":"main","pipeline":"p","name":"r","type":"git","pinned_version":{"ref":"a"}}"#,
    );
    tolerated::<ResourceVersion>(
        "ResourceVersion",
        r#"{"id":1,"version":{"ref":"a"},"metadata":[],"enabled":true,"check_order":1,"created_at":5}"#,
    );
}

#[test]
fn pipeline_requests_refuse_unknown_fields() {
    refused::<RenamePipeline>("RenamePipeline", r#"{"name":"new"}"#);
    refused::<VersionsQuery>("VersionsQuery", r#"{"limit":5}"#);
}

#[test]
fn requests_refuse_unknown_fields_and_name_them() {
    refused::<RegisterWorker>(
        "RegisterWorker",
        r#"{"name":"w","state_identity":"s","platform":"linux","version":"1"}"#,
    );
    refused::<Heartbeat>(
        "Heartbeat",
        &format!(r#"{{"generation":1,"containers":0,"volumes":0,"condition":{CONDITION}}}"#),
    );
    refused::<CreateVolume>(
        "CreateVolume",
        r#"{"worker":"w","strategy":"import","import_path":"/x","owner_kind":"task-cache"}"#,
    );
    refused::<VolumeReport>(
        "VolumeReport",
        r#"{"generation":1,"handles":["a"],"containers":[]}"#,
    );
    refused::<worker_api::CreateVolume>(
        "worker_api::CreateVolume",
        r#"{"handle":"h","strategy":"empty"}"#,
    );
    refused::<worker_api::SetProperty>("SetProperty", r#"{"value":"v"}"#);
    refused::<CreateBuild>("CreateBuild", r#"{"plan":[]}"#);
    refused::<ResourceAction>(
        "ResourceAction",
        r#"{"resource_type":"git","action":"check","request":{}}"#,
    );
    refused::<ContainerSpec>(
        "ContainerSpec",
        r#"{"handle":"c","runtime":"process","path":"sh"}"#,
    );
    refused::<Mount>("Mount", r#"{"volume":"v","path":"in"}"#);
}

/// A container's CPU shares travel as `cpu_shares`, next to its memory
/// limit, and are left out when unset: a worker that predates the field
/// (and refuses unknown ones) still takes every spec without a CPU limit.
#[test]
fn a_container_spec_carries_cpu_shares_only_when_set() {
    let with: ContainerSpec = serde_json::from_str(
        r#"{"handle":"c","runtime":"runc","rootfs_volume":"r","path":"sh",
            "memory_limit_bytes":67108864,"cpu_shares":512}"#,
    )
    .unwrap();
    assert_eq!(
        (with.memory_limit_bytes, with.cpu_shares),
        (Some(64 << 20), Some(512))
    );
    let json = serde_json::to_value(&with).unwrap();
    assert_eq!(json["cpu_shares"], 512);
    let back: ContainerSpec = serde_json::from_value(json).unwrap();
    assert_eq!(back, with);

    let without: ContainerSpec =
        serde_json::from_str(r#"{"handle":"c","runtime":"process","path":"sh"}"#).unwrap();
    assert_eq!(without.cpu_shares, None);
    let json = serde_json::to_value(&without).unwrap();
    assert!(json.get("cpu_shares").is_none(), "{json}");

    let err = serde_json::from_str::<ContainerSpec>(
        r#"{"handle":"c","runtime":"process","path":"sh","cpu_shares":"512"}"#,
    )
    .unwrap_err();
    assert!(err.to_string().contains("invalid type"), "{err}");
}

/// `privileged` (a container spec, a resource action) and
/// `allow_privileged` (a registration) travel only when true: a worker or
/// web that predates them (and refuses unknown fields) still takes every
/// request that asks for nothing privileged, and one that asks is refused
/// by it rather than run unprivileged behind the caller's back.
#[test]
fn privileged_travels_only_when_true() {
    fn round_trip<T>(name: &str, base: &str, field: &str, get: fn(&T) -> bool)
    where
        T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug,
    {
        let plain: T = serde_json::from_str(base).unwrap();
        assert!(!get(&plain), "{name}");
        let json = serde_json::to_value(&plain).unwrap();
        assert!(json.get(field).is_none(), "{name}: {json}");
        let mut asked: Value = serde_json::from_str(base).unwrap();
        asked[field] = Value::Bool(true);
        let asked: T = serde_json::from_value(asked).unwrap();
        assert!(get(&asked), "{name}");
        let json = serde_json::to_value(&asked).unwrap();
        assert_eq!(json[field], Value::Bool(true), "{name}");
        assert_eq!(serde_json::from_value::<T>(json).unwrap(), asked, "{name}");
    }
    round_trip::<ContainerSpec>(
        "ContainerSpec",
        r#"{"handle":"c","runtime":"runc","rootfs_volume":"r","path":"sh"}"#,
        "privileged",
        |s| s.privileged,
    );
    round_trip::<ResourceAction>(
        "ResourceAction",
        r#"{"resource_type":"dind","action":"check","image_volume":"i","request":{}}"#,
        "privileged",
        |a| a.privileged,
    );
    round_trip::<RegisterWorker>(
        "RegisterWorker",
        r#"{"name":"w","state_identity":"s","platform":"linux","version":"1"}"#,
        "allow_privileged",
        |r| r.allow_privileged,
    );
}

/// `BaseResourceType` and `WorkerCondition` travel both ways: refused with
/// an unknown field inside a registration or heartbeat, tolerated inside a
/// listed `Worker`.
#[test]
fn nested_types_are_strict_in_requests_and_tolerant_in_responses() {
    let rt = with_extra(RESOURCE_TYPE);
    let condition = with_extra(CONDITION);
    let worker = format!(
        r#"{{"name":"w","state":"running","state_identity":"s","generation":1,
            "platform":"linux","tags":[],"team":null,"version":"1","resource_types":[{rt}],
            "ephemeral":false,"containers":0,"volumes":0,"first_registered_at":0,
            "registered_at":0,"last_heartbeat_at":0,"state_changed_at":0,"restarts":0,
            "api_url":null,"last_event":null,"last_restart":null,"condition":{condition}}}"#
    );
    let parsed: Worker = serde_json::from_str(&worker).expect("a newer web's worker parses");
    assert_eq!(parsed.resource_types[0].type_name, "git");
    assert_eq!(
        parsed.condition.expect("condition").pressure,
        Pressure::Soft
    );

    let registration = |rt: &str| {
        format!(
            r#"{{"name":"w","state_identity":"s","platform":"linux","version":"1",
                "resource_types":[{rt}]}}"#
        )
    };
    let heartbeat =
        |c: &str| format!(r#"{{"generation":1,"containers":0,"volumes":0,"condition":{c}}}"#);
    let ok: RegisterWorker = serde_json::from_str(&registration(RESOURCE_TYPE)).unwrap();
    assert_eq!(ok.resource_types.len(), 1);
    let ok: Heartbeat = serde_json::from_str(&heartbeat(CONDITION)).unwrap();
    assert!(ok.condition.is_some());
    let ok: Heartbeat = serde_json::from_str(&heartbeat("null")).unwrap();
    assert!(ok.condition.is_none());

    let unknown = format!("unknown field `{EXTRA}`");
    let err = serde_json::from_str::<RegisterWorker>(&registration(&rt)).unwrap_err();
    assert!(err.to_string().contains(&unknown), "registration: {err}");
    let err = serde_json::from_str::<Heartbeat>(&heartbeat(&condition)).unwrap_err();
    assert!(err.to_string().contains(&unknown), "heartbeat: {err}");
}

/// Every value of `T` is spelled on the wire as its `as_str()` (and
/// `Display`), and that spelling reads back as the same value.
fn spelled_as_displayed<T>(name: &str, all: &[T])
where
    T: Serialize + DeserializeOwned + std::fmt::Display + std::fmt::Debug + PartialEq,
{
    assert!(!all.is_empty(), "{name}: no values");
    for value in all {
        let json = serde_json::to_value(value).unwrap();
        assert_eq!(json, Value::from(value.to_string()), "{name}::{value:?}");
        let back: T = serde_json::from_value(json).unwrap();
        assert_eq!(&back, value, "{name}: {value} does not read back");
    }
}

#[test]
fn every_wire_enum_is_spelled_as_it_displays() {
    spelled_as_displayed("WorkerState", &WorkerState::ALL);
    spelled_as_displayed("EventKind", &EventKind::ALL);
    spelled_as_displayed("Pressure", &Pressure::ALL);
    spelled_as_displayed("RegistrationKind", &RegistrationKind::ALL);
    spelled_as_displayed("VolumeState", &VolumeState::ALL);
    spelled_as_displayed("OwnerKind", &OwnerKind::ALL);
    spelled_as_displayed("Strategy", &Strategy::ALL);
    spelled_as_displayed("BuildStatus", BuildStatus::ALL);
    spelled_as_displayed("StepState", StepState::ALL);
    spelled_as_displayed("StepKind", StepKind::ALL);
    spelled_as_displayed("BuildEventKind", BuildEventKind::ALL);
    spelled_as_displayed("Runtime", &Runtime::ALL);
    spelled_as_displayed("ActionFailure", &ActionFailure::ALL);
    spelled_as_displayed("RunState", &RunState::ALL);
    let commands: Vec<CommandState> = WorkerState::ALL
        .into_iter()
        .map(CommandState::Worker)
        .chain([CommandState::REMOVED])
        .collect();
    spelled_as_displayed("CommandState", &commands);
}

/// Not yet forward compatible: a value a client does not know fails the
/// whole response (see ARCHITECTURE.md, `hangar-api`). When the listed
/// fields learn to keep unknown spellings, this test turns around.
#[test]
fn an_unknown_enum_value_in_a_response_is_still_refused() {
    let event = EVENT.replace("restarted-state-lost", "hibernated");
    let err = serde_json::from_str::<WorkerEvent>(&event).unwrap_err();
    assert!(
        err.to_string().contains("unknown variant `hibernated`"),
        "{err}"
    );
}
