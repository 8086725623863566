//! Users' logged-in sessions. Web hands the user a random token and keeps
//! only its digest here; a session is good until its absolute expiry, an
//! idle spell, or its revocation at logout.

use hangar_core::UnixMillis;
use sqlx::Row;

use crate::db::Store;
use crate::error::StoreError;

/// Who a session is for, as the connector vouched at login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    pub id: i64,
    pub connector: String,
    pub user_id: String,
    pub user_name: String,
    /// The groups claim, as a JSON list.
    pub groups: String,
    pub created_at: UnixMillis,
    pub last_used_at: UnixMillis,
    pub expires_at: UnixMillis,
}

/// A session to write at login.
#[derive(Debug, Clone)]
pub struct NewSession<'a> {
    pub token_digest: &'a str,
    pub connector: &'a str,
    pub user_id: &'a str,
    pub user_name: &'a str,
    pub groups: &'a str,
    pub expires_at: UnixMillis,
}

/// A session's use is written at most this often, so that every API call
/// does not write a row.
const TOUCH_EVERY_MS: i64 = 60_000;

impl Store {
    /// Writes a new session.
    pub async fn create_session(
        &self,
        s: &NewSession<'_>,
        now: UnixMillis,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO sessions (token_digest, connector, user_id, user_name, groups, \
             created_at, last_used_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $6, $7)",
        )
        .bind(s.token_digest)
        .bind(s.connector)
        .bind(s.user_id)
        .bind(s.user_name)
        .bind(s.groups)
        .bind(now)
        .bind(s.expires_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The live session whose token has `digest`: not revoked, not past its
    /// expiry, used within `idle_ms`. Records the use.
    pub async fn live_session(
        &self,
        digest: &str,
        idle_ms: i64,
        now: UnixMillis,
    ) -> Result<Option<SessionRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT id, connector, user_id, user_name, groups, created_at, last_used_at, \
             expires_at FROM sessions WHERE token_digest = $1 AND revoked_at IS NULL \
             AND expires_at > $2 AND last_used_at > $3",
        )
        .bind(digest)
        .bind(now)
        .bind(now - idle_ms)
        .fetch_optional(&self.pool)
        .await?;
        let Some(r) = row else { return Ok(None) };
        let session = SessionRecord {
            id: r.try_get("id")?,
            connector: r.try_get("connector")?,
            user_id: r.try_get("user_id")?,
            user_name: r.try_get("user_name")?,
            groups: r.try_get("groups")?,
            created_at: r.try_get("created_at")?,
            last_used_at: r.try_get("last_used_at")?,
            expires_at: r.try_get("expires_at")?,
        };
        if now - session.last_used_at >= TOUCH_EVERY_MS {
            sqlx::query("UPDATE sessions SET last_used_at = $1 WHERE id = $2")
                .bind(now)
                .bind(session.id)
                .execute(&self.pool)
                .await?;
        }
        Ok(Some(session))
    }

    /// Ends the session whose token has `digest`; true when it was live.
    pub async fn revoke_session(&self, digest: &str, now: UnixMillis) -> Result<bool, StoreError> {
        let n = sqlx::query(
            "UPDATE sessions SET revoked_at = $1 WHERE token_digest = $2 AND revoked_at IS NULL",
        )
        .bind(now)
        .bind(digest)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n > 0)
    }

    /// Deletes sessions that ended more than `keep_ms` ago (expired, idle
    /// or revoked); answers how many.
    pub async fn prune_sessions(
        &self,
        idle_ms: i64,
        keep_ms: i64,
        now: UnixMillis,
    ) -> Result<u64, StoreError> {
        let before = now - keep_ms;
        Ok(sqlx::query(
            "DELETE FROM sessions WHERE expires_at < $1 OR last_used_at < $2 OR revoked_at < $1",
        )
        .bind(before)
        .bind(before - idle_ms)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }
}

/// Rows of logins under way that one web node keeps at most: past it, a
/// new login is refused until old ones expire, so a flood of unfinished
/// logins cannot fill the database.
pub const MAX_PENDING_LOGINS: i64 = 10_000;

impl Store {
    /// Keeps a login under way (`kind` names its stage) until `expires_at`,
    /// after deleting expired ones. False, keeping nothing, when
    /// [`MAX_PENDING_LOGINS`] are already under way.
    pub async fn put_pending_login(
        &self,
        kind: &str,
        key_digest: &str,
        payload: &str,
        expires_at: UnixMillis,
        now: UnixMillis,
    ) -> Result<bool, StoreError> {
        sqlx::query("DELETE FROM pending_logins WHERE expires_at <= $1")
            .bind(now)
            .execute(&self.pool)
            .await?;
        let n: i64 = sqlx::query("SELECT COUNT(*) AS n FROM pending_logins")
            .fetch_one(&self.pool)
            .await?
            .try_get("n")?;
        if n >= MAX_PENDING_LOGINS {
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO pending_logins (key_digest, kind, payload, expires_at) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(key_digest)
        .bind(kind)
        .bind(payload)
        .bind(expires_at)
        .execute(&self.pool)
        .await?;
        Ok(true)
    }

    /// Takes the login under way of `kind` whose key has `key_digest`: its
    /// payload, if it is there and not expired. It is deleted either way,
    /// so a key works once.
    pub async fn take_pending_login(
        &self,
        kind: &str,
        key_digest: &str,
        now: UnixMillis,
    ) -> Result<Option<String>, StoreError> {
        let row = sqlx::query(
            "DELETE FROM pending_logins WHERE key_digest = $1 AND kind = $2 \
             RETURNING payload, expires_at",
        )
        .bind(key_digest)
        .bind(kind)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let expires_at: i64 = row.try_get("expires_at")?;
        Ok((expires_at > now)
            .then(|| row.try_get("payload"))
            .transpose()?)
    }
}

#[cfg(test)]
mod tests {
    use crate::test_db::{postgres_store, sqlite_store};
    use crate::{NewSession, Store, TeamSet};

    fn new(digest: &str, expires_at: i64) -> NewSession<'_> {
        NewSession {
            token_digest: digest,
            connector: "local",
            user_id: "alice",
            user_name: "alice",
            groups: "[]",
            expires_at,
        }
    }

    async fn sessions_end_by_expiry_idleness_and_revocation(store: Store) {
        let idle = 1_000_000;
        store
            .create_session(&new("d1", 10_000_000), 0)
            .await
            .unwrap();
        store
            .create_session(&new("d2", 10_000_000), 0)
            .await
            .unwrap();
        let live = store.live_session("d1", idle, 500_000).await.unwrap();
        assert_eq!(live.as_ref().map(|s| s.user_name.as_str()), Some("alice"));
        // Used at 500 s, so still live at 1,400 s; d2, unused, is idle.
        assert!(store
            .live_session("d1", idle, 1_400_000)
            .await
            .unwrap()
            .is_some());
        assert!(store
            .live_session("d2", idle, 1_400_000)
            .await
            .unwrap()
            .is_none());
        // Past the absolute expiry, however recently used.
        assert!(store
            .live_session("d1", idle, 10_000_000)
            .await
            .unwrap()
            .is_none());
        assert!(store.live_session("nope", idle, 1).await.unwrap().is_none());
        assert!(store.revoke_session("d1", 1_500_000).await.unwrap());
        assert!(!store.revoke_session("d1", 1_500_001).await.unwrap());
        assert!(store
            .live_session("d1", idle, 1_500_002)
            .await
            .unwrap()
            .is_none());
        // Both ended; pruned once they have been over for `keep`.
        assert_eq!(store.prune_sessions(idle, 1, 1_500_100).await.unwrap(), 2);
        assert_eq!(store.prune_sessions(idle, 1, 1_500_100).await.unwrap(), 0);
    }

    async fn teams_are_set_renamed_and_destroyed_with_what_they_own(store: Store) {
        let auth = r#"{"owner":{"users":["local:alice"]}}"#;
        assert!(store.set_team_auth("a", auth, false, 1).await.is_err());
        assert!(store.team("a").await.unwrap().is_none());
        assert_eq!(
            store.set_team_auth("a", auth, true, 1).await.unwrap(),
            TeamSet::Created
        );
        assert_eq!(
            store.set_team_auth("a", "{}", false, 2).await.unwrap(),
            TeamSet::Updated
        );
        let auths = store.team_auths().await.unwrap();
        let names: Vec<_> = auths
            .iter()
            .map(|t| (t.name.as_str(), t.auth.as_str()))
            .collect();
        assert_eq!(names, [("a", "{}"), ("main", "{}")]);
        let config = hangar_core::pipeline::parse_pipeline(
            "jobs:\n- name: j\n  plan:\n  - task: t\n    config: {platform: linux, run: {path: \"true\"}}\n",
        )
            .unwrap()
            .config;
        store
            .set_pipeline("a", "p", &config, None, 3)
            .await
            .unwrap();
        let b = store
            .create_build("one-off", Some("a"), "{}", "[]", 3)
            .await
            .unwrap()
            .id;
        store.create_team("b", 3).await.unwrap();
        assert!(matches!(
            store.rename_team("a", "b").await,
            Err(crate::StoreError::Conflict(_))
        ));
        assert!(matches!(
            store.rename_team("zz", "c").await,
            Err(crate::StoreError::NotFound(_))
        ));
        store.rename_team("a", "c").await.unwrap();
        assert_eq!(store.pipelines("c").await.unwrap().len(), 1);
        assert_eq!(
            store.get_build(b).await.unwrap().unwrap().team.as_deref(),
            Some("c")
        );
        store.destroy_team("c", 4).await.unwrap();
        assert!(store.team("c").await.unwrap().is_none());
        let build = store.get_build(b).await.unwrap().unwrap();
        assert_eq!(build.status.to_string(), "aborted");
        assert!(matches!(
            store.destroy_team("c", 5).await,
            Err(crate::StoreError::NotFound(_))
        ));
        assert!(store.team("b").await.unwrap().is_some());
    }

    async fn a_pending_login_is_taken_once_and_not_after_it_expires(store: Store) {
        assert!(store
            .put_pending_login("oidc", "k1", "one", 1_000, 0)
            .await
            .unwrap());
        assert!(store
            .put_pending_login("oidc", "k2", "two", 1_000, 0)
            .await
            .unwrap());
        // Another stage's key does not take it.
        assert_eq!(
            store.take_pending_login("cli", "k1", 10).await.unwrap(),
            None
        );
        assert_eq!(
            store
                .take_pending_login("oidc", "k1", 10)
                .await
                .unwrap()
                .as_deref(),
            Some("one")
        );
        assert_eq!(
            store.take_pending_login("oidc", "k1", 11).await.unwrap(),
            None
        );
        // Expired: nothing, and gone.
        assert_eq!(
            store.take_pending_login("oidc", "k2", 1_000).await.unwrap(),
            None
        );
        // A reused key is refused by the database, not overwritten.
        store
            .put_pending_login("oidc", "k3", "three", 5_000, 2_000)
            .await
            .unwrap();
        assert!(store
            .put_pending_login("oidc", "k3", "other", 5_000, 2_000)
            .await
            .is_err());
        assert_eq!(
            store
                .take_pending_login("oidc", "k3", 2_001)
                .await
                .unwrap()
                .as_deref(),
            Some("three")
        );
    }

    #[tokio::test]
    async fn pending_logins_on_sqlite() {
        a_pending_login_is_taken_once_and_not_after_it_expires(sqlite_store().await).await;
    }

    #[tokio::test]
    async fn pending_logins_on_postgres() {
        a_pending_login_is_taken_once_and_not_after_it_expires(postgres_store().await).await;
    }

    #[tokio::test]
    async fn sessions_on_sqlite() {
        sessions_end_by_expiry_idleness_and_revocation(sqlite_store().await).await;
    }

    #[tokio::test]
    async fn sessions_on_postgres() {
        sessions_end_by_expiry_idleness_and_revocation(postgres_store().await).await;
    }

    #[tokio::test]
    async fn teams_on_sqlite() {
        teams_are_set_renamed_and_destroyed_with_what_they_own(sqlite_store().await).await;
    }

    #[tokio::test]
    async fn teams_on_postgres() {
        teams_are_set_renamed_and_destroyed_with_what_they_own(postgres_store().await).await;
    }
}
