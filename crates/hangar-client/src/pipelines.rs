//! Pipelines through web's API, scoped by team.

use hangar_api::pipelines::{
    Job, Pipeline, PipelineConfig, PipelineSaved, RenamePipeline, Resource, ResourceVersion,
    VersionsQuery, CONFIG_VERSION_HEADER,
};
use reqwest::{Method, Url};

use crate::{decode, Client, ClientError};

impl Client {
    pub(crate) fn pipelines_url(&self, team: &str, rest: &[&str]) -> Url {
        let mut segments = vec!["teams", team, "pipelines"];
        segments.extend_from_slice(rest);
        self.url(&segments)
    }

    /// Sends a request whose success has no body (204).
    pub(crate) async fn call_no_content<B: serde::Serialize>(
        &self,
        method: Method,
        url: Url,
        body: Option<&B>,
    ) -> Result<(), ClientError> {
        let mut req = self.raw_request(method, url.clone());
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = req.send().await.map_err(|source| ClientError::Transport {
            url: url.to_string(),
            source,
        })?;
        if resp.status().is_success() {
            return Ok(());
        }
        // An error answer: decode reads its body into the error.
        decode::<serde_json::Value>(url, resp).await.map(|_| ())
    }

    /// Sets a pipeline's config from its YAML text. `expected`: the config
    /// version the change was made from (0 for a new pipeline); web refuses
    /// the set with 409 if the pipeline is at another.
    pub async fn set_pipeline(
        &self,
        team: &str,
        name: &str,
        yaml: &str,
        expected: Option<i64>,
    ) -> Result<PipelineSaved, ClientError> {
        let url = self.pipelines_url(team, &[name, "config"]);
        let mut req = self
            .raw_request(Method::PUT, url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/x-yaml")
            .body(yaml.to_string());
        if let Some(v) = expected {
            req = req.header(CONFIG_VERSION_HEADER, v.to_string());
        }
        let resp = req.send().await.map_err(|source| ClientError::Transport {
            url: url.to_string(),
            source,
        })?;
        decode(url, resp).await
    }

    pub async fn pipelines(&self, team: &str) -> Result<Vec<Pipeline>, ClientError> {
        self.call::<(), _>(Method::GET, self.pipelines_url(team, &[]), None)
            .await
    }

    pub async fn pipeline(&self, team: &str, name: &str) -> Result<Pipeline, ClientError> {
        self.call::<(), _>(Method::GET, self.pipelines_url(team, &[name]), None)
            .await
    }

    /// The pipeline's current config, or `None` if it does not exist.
    pub async fn pipeline_config(
        &self,
        team: &str,
        name: &str,
    ) -> Result<Option<PipelineConfig>, ClientError> {
        let url = self.pipelines_url(team, &[name, "config"]);
        match self
            .call::<(), PipelineConfig>(Method::GET, url, None)
            .await
        {
            Ok(config) => Ok(Some(config)),
            Err(ClientError::Api {
                status, message, ..
            }) if status == reqwest::StatusCode::NOT_FOUND && message.starts_with("pipeline ") => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    pub async fn destroy_pipeline(&self, team: &str, name: &str) -> Result<(), ClientError> {
        self.call_no_content::<()>(Method::DELETE, self.pipelines_url(team, &[name]), None)
            .await
    }

    pub async fn pause_pipeline(
        &self,
        team: &str,
        name: &str,
        paused: bool,
    ) -> Result<(), ClientError> {
        let verb = if paused { "pause" } else { "unpause" };
        self.call_no_content::<()>(Method::PUT, self.pipelines_url(team, &[name, verb]), None)
            .await
    }

    /// Removes a job's task step's caches (one cache path, or all).
    pub async fn clear_task_cache(
        &self,
        team: &str,
        pipeline: &str,
        job: &str,
        step: &str,
        cache_path: Option<&str>,
    ) -> Result<hangar_api::pipelines::CachesRemoved, ClientError> {
        let mut url = self.pipelines_url(team, &[pipeline, "jobs", job, "tasks", step, "cache"]);
        if let Some(path) = cache_path {
            url.query_pairs_mut().append_pair("cache_path", path);
        }
        self.call::<(), _>(Method::DELETE, url, None).await
    }

    /// Removes the caches a pipeline resource's gets made: every version's,
    /// or those having all of `version`'s fields.
    pub async fn clear_resource_cache(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
        version: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<hangar_api::pipelines::CachesRemoved, ClientError> {
        let mut url = self.pipelines_url(team, &[pipeline, "resources", resource, "cache"]);
        if let Some(v) = version {
            url.query_pairs_mut()
                .append_pair("version", &serde_json::Value::Object(v.clone()).to_string());
        }
        self.call::<(), _>(Method::DELETE, url, None).await
    }

    /// Puts the team's pipelines named in `names` first, in that order.
    pub async fn order_pipelines(&self, team: &str, names: &[String]) -> Result<(), ClientError> {
        self.call_no_content(
            Method::PUT,
            self.pipelines_url(team, &["ordering"]),
            Some(&names),
        )
        .await
    }

    /// Archives a pipeline: paused, its config emptied, its history kept.
    pub async fn archive_pipeline(&self, team: &str, name: &str) -> Result<(), ClientError> {
        self.call_no_content::<()>(
            Method::PUT,
            self.pipelines_url(team, &[name, "archive"]),
            None,
        )
        .await
    }

    /// Makes a pipeline readable by anyone (`exposed`), or hides it again.
    pub async fn expose_pipeline(
        &self,
        team: &str,
        name: &str,
        exposed: bool,
    ) -> Result<(), ClientError> {
        let verb = if exposed { "expose" } else { "hide" };
        self.call_no_content::<()>(Method::PUT, self.pipelines_url(team, &[name, verb]), None)
            .await
    }

    pub async fn rename_pipeline(
        &self,
        team: &str,
        name: &str,
        new_name: &str,
    ) -> Result<(), ClientError> {
        let body = RenamePipeline {
            name: new_name.to_string(),
        };
        self.call_no_content(
            Method::PUT,
            self.pipelines_url(team, &[name, "rename"]),
            Some(&body),
        )
        .await
    }

    pub async fn jobs(&self, team: &str, pipeline: &str) -> Result<Vec<Job>, ClientError> {
        self.call::<(), _>(
            Method::GET,
            self.pipelines_url(team, &[pipeline, "jobs"]),
            None,
        )
        .await
    }

    pub async fn job(&self, team: &str, pipeline: &str, job: &str) -> Result<Job, ClientError> {
        self.call::<(), _>(
            Method::GET,
            self.pipelines_url(team, &[pipeline, "jobs", job]),
            None,
        )
        .await
    }

    pub async fn pause_job(
        &self,
        team: &str,
        pipeline: &str,
        job: &str,
        paused: bool,
    ) -> Result<(), ClientError> {
        let verb = if paused { "pause" } else { "unpause" };
        self.call_no_content::<()>(
            Method::PUT,
            self.pipelines_url(team, &[pipeline, "jobs", job, verb]),
            None,
        )
        .await
    }

    pub async fn resources(
        &self,
        team: &str,
        pipeline: &str,
    ) -> Result<Vec<Resource>, ClientError> {
        self.call::<(), _>(
            Method::GET,
            self.pipelines_url(team, &[pipeline, "resources"]),
            None,
        )
        .await
    }

    pub async fn resource_versions(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
        page: VersionsQuery,
    ) -> Result<Vec<ResourceVersion>, ClientError> {
        let mut url = self.pipelines_url(team, &[pipeline, "resources", resource, "versions"]);
        {
            let mut q = url.query_pairs_mut();
            for (key, value) in [
                ("limit", page.limit),
                ("before", page.before),
                ("after", page.after),
            ] {
                if let Some(v) = value {
                    q.append_pair(key, &v.to_string());
                }
            }
        }
        self.call::<(), _>(Method::GET, url, None).await
    }
}

impl Client {
    /// Starts a build of a job (`trigger-job`): `P/J #N`, pending.
    pub async fn trigger_job(
        &self,
        team: &str,
        pipeline: &str,
        job: &str,
    ) -> Result<hangar_api::builds::Build, ClientError> {
        let url = self.pipelines_url(team, &[pipeline, "jobs", job, "builds"]);
        self.call::<(), _>(Method::POST, url, None).await
    }

    /// Runs build `number` of a job again with the versions it took.
    pub async fn rerun_job_build(
        &self,
        team: &str,
        pipeline: &str,
        job: &str,
        number: i64,
    ) -> Result<hangar_api::builds::Build, ClientError> {
        let number = number.to_string();
        let url = self.pipelines_url(team, &[pipeline, "jobs", job, "builds", &number]);
        self.call::<(), _>(Method::POST, url, None).await
    }

    /// A job's inputs as a trigger now would fetch them.
    pub async fn job_inputs(
        &self,
        team: &str,
        pipeline: &str,
        job: &str,
    ) -> Result<hangar_api::builds::JobInputs, ClientError> {
        let url = self.pipelines_url(team, &[pipeline, "jobs", job, "inputs"]);
        self.call::<(), _>(Method::GET, url, None).await
    }

    /// A job's builds, newest first.
    pub async fn job_builds(
        &self,
        team: &str,
        pipeline: &str,
        job: &str,
        limit: u32,
    ) -> Result<Vec<hangar_api::builds::Build>, ClientError> {
        let mut url = self.pipelines_url(team, &[pipeline, "jobs", job, "builds"]);
        url.query_pairs_mut()
            .append_pair("limit", &limit.to_string());
        self.call::<(), _>(Method::GET, url, None).await
    }

    /// Build number `number` of a job, with its steps.
    pub async fn job_build(
        &self,
        team: &str,
        pipeline: &str,
        job: &str,
        number: i64,
    ) -> Result<hangar_api::builds::Build, ClientError> {
        let n = number.to_string();
        let url = self.pipelines_url(team, &[pipeline, "jobs", job, "builds", &n]);
        self.call::<(), _>(Method::GET, url, None).await
    }
}
