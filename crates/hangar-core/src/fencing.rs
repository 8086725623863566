//! Generations fence stale worker processes: every registration gets a new,
//! globally increasing generation, and anything a worker sends carries the
//! generation it registered as. Only the current one is listened to.

use crate::lifecycle::WorkerState;

/// Why web refuses a message from a worker process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No row for the name (pruned, retired, removed): the process may
    /// register again if it means to keep working.
    Unknown,
    /// A newer registration took the name: this process is a zombie and must
    /// stop, or it would corrupt its successor's state.
    Superseded { current: i64 },
    /// The worker was declared stalled and its work handed elsewhere: it must
    /// register again (as a new generation) before it gets anything.
    Stalled,
}

impl Refusal {
    pub fn message(&self, name: &str, generation: i64) -> String {
        match self {
            Refusal::Unknown => format!("worker {name} is not registered"),
            // The current generation is not named: the caller may be anyone
            // holding an old credential, and learns nothing it could use.
            Refusal::Superseded { .. } => format!(
                "worker {name} generation {generation} was superseded by a newer registration; this process must stop"
            ),
            Refusal::Stalled => {
                format!("worker {name} was declared stalled; register again to take work")
            }
        }
    }
}

/// Checks a message from `generation` against the row web holds.
pub fn check_generation(row: Option<(WorkerState, i64)>, generation: i64) -> Result<(), Refusal> {
    match row {
        None => Err(Refusal::Unknown),
        Some((_, current)) if current != generation => Err(Refusal::Superseded { current }),
        Some((WorkerState::Stalled, _)) => Err(Refusal::Stalled),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use WorkerState::*;

    #[test]
    fn generations_are_checked_against_the_row() {
        let cases = [
            (None, 3, Err(Refusal::Unknown)),
            (Some((Running, 3)), 3, Ok(())),
            (Some((Landing, 3)), 3, Ok(())),
            (Some((Retiring, 3)), 3, Ok(())),
            (Some((Landed, 3)), 3, Ok(())),
            (
                Some((Running, 4)),
                3,
                Err(Refusal::Superseded { current: 4 }),
            ),
            // A generation from the future is as foreign as one from the past.
            (
                Some((Running, 2)),
                3,
                Err(Refusal::Superseded { current: 2 }),
            ),
            (Some((Stalled, 3)), 3, Err(Refusal::Stalled)),
            (
                Some((Stalled, 5)),
                3,
                Err(Refusal::Superseded { current: 5 }),
            ),
        ];
        for (row, generation, expected) in cases {
            assert_eq!(
                check_generation(row, generation),
                expected,
                "{row:?} {generation}"
            );
        }
    }
}
