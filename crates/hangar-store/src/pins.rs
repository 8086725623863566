//! Pinning a resource to a version, and disabling versions, as
//! Concourse's `pin-resource`, `unpin-resource`, `enable-resource-version`
//! and `disable-resource-version` do. A version is named by some of its
//! fields (`-v ref:abc`): the newest version with those values is meant.

use serde_json::{Map, Value};
use sqlx::Row;

use crate::db::Store;
use crate::error::StoreError;
use crate::pipelines::ResourceRecord;

/// A resource's pin as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePin {
    /// The pinned version's JSON.
    pub version: String,
    /// Set by the config's `version:` (not changeable through the API).
    pub from_config: bool,
    pub comment: Option<String>,
}

impl Store {
    async fn version_named(
        &self,
        r: &ResourceRecord,
        fields: &Map<String, Value>,
        what: &str,
    ) -> Result<i64, StoreError> {
        self.match_pinned_version(r.id, fields)
            .await?
            .ok_or_else(|| {
                StoreError::NotFound(format!(
                    "{what}: resource {} has no version matching {}",
                    r.name,
                    Value::Object(fields.clone())
                ))
            })
    }

    fn refuse_config_pin(r: &ResourceRecord) -> Result<(), StoreError> {
        match &r.pinned {
            Some(pin) => Err(StoreError::Conflict(format!(
                "resource {} is pinned to {pin} by its pipeline's config (version:); \
                 change the config to change the pin",
                r.name
            ))),
            None => Ok(()),
        }
    }

    /// Pins the resource to its newest version matching `fields`.
    pub async fn pin_resource(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
        fields: &Map<String, Value>,
        comment: Option<&str>,
    ) -> Result<(), StoreError> {
        let r = self.resource(team, pipeline, resource).await?;
        Self::refuse_config_pin(&r)?;
        let version = self.version_named(&r, fields, "pin").await?;
        sqlx::query(
            "UPDATE resources SET api_pinned_version_id = $1, pin_comment = $2 WHERE id = $3",
        )
        .bind(version)
        .bind(comment)
        .bind(r.id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Removes the API's pin (nothing to do without one).
    pub async fn unpin_resource(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
    ) -> Result<(), StoreError> {
        let r = self.resource(team, pipeline, resource).await?;
        Self::refuse_config_pin(&r)?;
        sqlx::query(
            "UPDATE resources SET api_pinned_version_id = NULL, pin_comment = NULL WHERE id = $1",
        )
        .bind(r.id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Enables or disables, for this resource, its newest version matching
    /// `fields`.
    pub async fn set_resource_version_enabled(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
        fields: &Map<String, Value>,
        enabled: bool,
    ) -> Result<(), StoreError> {
        let r = self.resource(team, pipeline, resource).await?;
        let what = if enabled { "enable" } else { "disable" };
        let version = self.version_named(&r, fields, what).await?;
        let sql = if enabled {
            "DELETE FROM resource_disabled_versions WHERE resource_id = $1 AND version_id = $2"
        } else {
            "INSERT INTO resource_disabled_versions (resource_id, version_id) VALUES ($1, $2) \
             ON CONFLICT (resource_id, version_id) DO NOTHING"
        };
        sqlx::query(sql)
            .bind(r.id)
            .bind(version)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The resource's pin: the config's (matched against its versions),
    /// else the API's.
    pub async fn resource_pin(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
    ) -> Result<Option<ResourcePin>, StoreError> {
        let r = self.resource(team, pipeline, resource).await?;
        if let Some(pin) = &r.pinned {
            return Ok(Some(ResourcePin {
                version: pin.clone(),
                from_config: true,
                comment: None,
            }));
        }
        let row = sqlx::query(
            "SELECT v.version, r.pin_comment FROM resources r \
             JOIN resource_versions v ON v.id = r.api_pinned_version_id WHERE r.id = $1",
        )
        .bind(r.id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| {
            Ok(ResourcePin {
                version: row.try_get("version")?,
                from_config: false,
                comment: row.try_get("pin_comment")?,
            })
        })
        .transpose()
    }

    /// The pins `pin-resource` set on a pipeline's resources: resource id →
    /// (the pinned version's JSON, the pin's comment). A config's
    /// `version:` is on the resource's row, not here.
    pub async fn api_pins(
        &self,
        pipeline_id: i64,
    ) -> Result<std::collections::HashMap<i64, (String, Option<String>)>, StoreError> {
        let rows = sqlx::query(
            "SELECT r.id, v.version, r.pin_comment FROM resources r \
             JOIN resource_versions v ON v.id = r.api_pinned_version_id \
             WHERE r.pipeline_id = $1 AND r.active = 1",
        )
        .bind(pipeline_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get("id")?,
                    (row.try_get("version")?, row.try_get("pin_comment")?),
                ))
            })
            .collect()
    }
}
