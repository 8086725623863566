//! Why a step's attempt stopped short of its value: it failed (a
//! [`StepFailure`], which the step's retry rule judges) or its build was
//! interrupted (this node stopped or lost the build's lease; the build
//! resumes elsewhere). One error type lets `?` carry both out of an
//! attempt, so no result nests inside another; the step's retry loop
//! splits them again ([`split`]) where it decides what happens next.

use hangar_core::build::StepFailure;

use crate::watch::Interrupted;

/// Why an attempt did not produce its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Halt {
    Failed(StepFailure),
    Interrupted,
}

/// What an attempt (or a part of one) produces, or why it did not.
pub(crate) type Attempt<T> = Result<T, Halt>;

impl From<StepFailure> for Halt {
    fn from(failure: StepFailure) -> Self {
        Halt::Failed(failure)
    }
}

impl From<Interrupted> for Halt {
    fn from(_: Interrupted) -> Self {
        Halt::Interrupted
    }
}

/// An attempt's result as its retry loop judges it: interrupted (the
/// build stops here, `?` in the loop), or its value or failure.
pub(crate) fn split<T>(attempt: Attempt<T>) -> Result<Result<T, StepFailure>, Interrupted> {
    match attempt {
        Ok(value) => Ok(Ok(value)),
        Err(Halt::Failed(failure)) => Ok(Err(failure)),
        Err(Halt::Interrupted) => Err(Interrupted),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn question_mark_carries_a_failure_and_an_interruption_and_split_tells_them_apart() {
        fn fails() -> Attempt<u8> {
            Err(StepFailure::Exited { code: 3 })?
        }
        fn interrupted() -> Attempt<u8> {
            Err(Interrupted)?
        }
        assert_eq!(split(Ok(7)), Ok(Ok(7)));
        assert_eq!(split(fails()), Ok(Err(StepFailure::Exited { code: 3 })));
        assert_eq!(split(interrupted()), Err(Interrupted));
    }
}
