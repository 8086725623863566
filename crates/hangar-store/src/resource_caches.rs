//! The resource caches a pipeline resource's gets made or reused, by key,
//! for `clear-resource-cache`.

use sqlx::Row;

use crate::db::Store;
use crate::error::StoreError;

impl Store {
    /// Notes that resource `resource_id`'s get used the cache `key`, which
    /// holds `version` (JSON). Noting it again changes nothing.
    pub async fn note_resource_cache(
        &self,
        resource_id: i64,
        key: &str,
        version: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO resource_cache_keys (resource_id, cache_key, version) \
             VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        )
        .bind(resource_id)
        .bind(key)
        .bind(version)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The caches noted for `resource_id`: each key with its version's
    /// JSON.
    pub async fn resource_cache_keys(
        &self,
        resource_id: i64,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let rows = sqlx::query(
            "SELECT cache_key, version FROM resource_cache_keys WHERE resource_id = $1 \
             ORDER BY cache_key",
        )
        .bind(resource_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("cache_key")?, r.try_get("version")?)))
            .collect()
    }

    /// Forgets that `resource_id` used the cache `key`.
    pub async fn forget_resource_cache(
        &self,
        resource_id: i64,
        key: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM resource_cache_keys WHERE resource_id = $1 AND cache_key = $2")
            .bind(resource_id)
            .bind(key)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use hangar_core::pipeline::parse_pipeline;

    use crate::test_db::{postgres_store, sqlite_store};
    use crate::Store;

    const CONFIG: &str = "
resources:
- {name: repo, type: git, source: {uri: x}}
- {name: other, type: git, source: {uri: y}}
jobs:
- {name: build, plan: [{get: repo}, {get: other}]}
";

    async fn a_resource_s_caches_are_noted_once_and_forgotten_one_by_one(store: Store) {
        let config = parse_pipeline(CONFIG).unwrap().config;
        store
            .set_pipeline("main", "p", &config, None, 1)
            .await
            .unwrap();
        let p = store.pipeline("main", "p").await.unwrap();
        let id = |name: &'static str| {
            let store = store.clone();
            async move {
                store
                    .pipeline_resource_id(p.id, name)
                    .await
                    .unwrap()
                    .unwrap()
            }
        };
        let (resource, other) = (id("repo").await, id("other").await);
        for (r, key, version) in [
            (resource, "git@aa", r#"{"ref":"1"}"#),
            (resource, "git@aa", r#"{"ref":"1"}"#),
            (resource, "git@bb", r#"{"ref":"2"}"#),
            (other, "git@aa", r#"{"ref":"1"}"#),
        ] {
            store.note_resource_cache(r, key, version).await.unwrap();
        }
        assert_eq!(
            store.resource_cache_keys(resource).await.unwrap(),
            vec![
                ("git@aa".to_string(), r#"{"ref":"1"}"#.to_string()),
                ("git@bb".to_string(), r#"{"ref":"2"}"#.to_string()),
            ]
        );
        store
            .forget_resource_cache(resource, "git@aa")
            .await
            .unwrap();
        assert_eq!(store.resource_cache_keys(resource).await.unwrap().len(), 1);
        assert_eq!(
            store.resource_cache_keys(other).await.unwrap().len(),
            1,
            "another resource's note of the same cache stays"
        );
    }

    #[tokio::test]
    async fn sqlite_a_resource_s_caches_are_noted_once_and_forgotten_one_by_one() {
        a_resource_s_caches_are_noted_once_and_forgotten_one_by_one(sqlite_store().await).await;
    }

    #[tokio::test]
    async fn postgres_a_resource_s_caches_are_noted_once_and_forgotten_one_by_one() {
        a_resource_s_caches_are_noted_once_and_forgotten_one_by_one(postgres_store().await).await;
    }
}
