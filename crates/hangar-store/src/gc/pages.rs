//! Collector candidates read a page at a time, oldest first.
//!
//! A collector never holds more than one page of rows: it plans and
//! applies each page before reading the next. Pages are keyed by
//! `(created_at, handle)`, not offsets, so rows a page marked (they leave
//! the filter) and rows it kept (they stay) move no later row across a
//! page boundary: every candidate is seen once per pass.

use hangar_core::gc::{GcContainer, GcVolume};
use hangar_core::UnixMillis;
use sqlx::any::AnyRow;

use super::{gc_container, gc_volume, GC_VOLUME_COLUMNS};
use crate::db::Store;
use crate::error::StoreError;

/// Which table a [`Pages`] reads, and how its rows become candidates.
pub(super) trait Candidate: Sized {
    /// `SELECT … FROM table v`: the columns `from_row` reads.
    fn select() -> String;
    fn from_row(row: &AnyRow) -> Result<Self, StoreError>;
    fn key(&self) -> (UnixMillis, &str);
}

impl Candidate for GcVolume {
    fn select() -> String {
        format!("SELECT {GC_VOLUME_COLUMNS} FROM volumes v")
    }
    fn from_row(row: &AnyRow) -> Result<Self, StoreError> {
        gc_volume(row)
    }
    fn key(&self) -> (UnixMillis, &str) {
        (self.created_at, &self.handle)
    }
}

impl Candidate for GcContainer {
    fn select() -> String {
        "SELECT v.handle, v.state, v.build_id, v.missing_since, v.created_at, v.kept_until \
         FROM containers v"
            .to_string()
    }
    fn from_row(row: &AnyRow) -> Result<Self, StoreError> {
        gc_container(row)
    }
    fn key(&self) -> (UnixMillis, &str) {
        (self.created_at, &self.handle)
    }
}

/// The pages of the rows matching `filter` (over alias `v`, binding
/// `binds` as `$1`…), `size` rows each.
pub(super) struct Pages<T> {
    first: String,
    rest: String,
    binds: Vec<i64>,
    size: usize,
    after: Option<(UnixMillis, String)>,
    done: bool,
    _rows: std::marker::PhantomData<T>,
}

impl<T: Candidate> Pages<T> {
    pub(super) fn new(filter: &str, binds: &[i64], size: usize) -> Self {
        let size = size.max(1);
        let select = T::select();
        let order = format!("ORDER BY v.created_at, v.handle LIMIT {size}");
        let (at, handle) = (binds.len() + 1, binds.len() + 2);
        // The row comparison is a range of the index on (state, owner_kind,
        // created_at, handle) (migration 0020) when the filter fixes the
        // first two.
        Pages {
            first: format!("{select} WHERE {filter} {order}"),
            rest: format!(
                "{select} WHERE {filter} AND (v.created_at, v.handle) > (${at}, ${handle}) {order}"
            ),
            binds: binds.to_vec(),
            size,
            after: None,
            done: false,
            _rows: std::marker::PhantomData,
        }
    }

    /// The next page, or `None` once every row was read.
    pub(super) async fn next(&mut self, store: &Store) -> Result<Option<Vec<T>>, StoreError> {
        if self.done {
            return Ok(None);
        }
        let mut q = sqlx::query(match self.after {
            Some(_) => &self.rest,
            None => &self.first,
        });
        for b in &self.binds {
            q = q.bind(*b);
        }
        if let Some((at, handle)) = &self.after {
            q = q.bind(*at).bind(handle.clone());
        }
        let rows: Vec<T> = q
            .fetch_all(&store.pool)
            .await?
            .iter()
            .map(T::from_row)
            .collect::<Result<_, _>>()?;
        self.done = rows.len() < self.size;
        let Some(last) = rows.last() else {
            self.done = true;
            return Ok(None);
        };
        let (at, handle) = last.key();
        self.after = Some((at, handle.to_string()));
        Ok(Some(rows))
    }
}
