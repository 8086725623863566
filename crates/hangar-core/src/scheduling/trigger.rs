//! Whether a job may be triggered by hand now (`trigger-job`, the
//! dashboard's button). Concourse creates such a build and holds it
//! pending until the pipeline or job is unpaused; hangar refuses, saying
//! why, so a trigger never waits unseen.

/// Why a manual trigger is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TriggerRefusal {
    PipelinePaused,
    JobPaused,
    /// The job's `disable_manual_trigger`: only its inputs trigger it.
    ManualTriggerDisabled,
}

/// What a manual trigger looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TriggerState {
    pub pipeline_paused: bool,
    pub job_paused: bool,
    pub disable_manual_trigger: bool,
}

/// The first reason, in that order, a manual trigger is refused.
pub fn manual_trigger(state: TriggerState) -> Result<(), TriggerRefusal> {
    if state.pipeline_paused {
        Err(TriggerRefusal::PipelinePaused)
    } else if state.job_paused {
        Err(TriggerRefusal::JobPaused)
    } else if state.disable_manual_trigger {
        Err(TriggerRefusal::ManualTriggerDisabled)
    } else {
        Ok(())
    }
}

impl TriggerRefusal {
    /// The refusal in words, for job `pipeline/job` (the pipeline as fly's
    /// reference), with what to do about it.
    pub fn words(&self, pipeline: &str, job: &str) -> String {
        match self {
            TriggerRefusal::PipelinePaused => format!(
                "pipeline {pipeline} is paused: unpause it first (hangar unpause-pipeline -p \
                 {pipeline}); Concourse would hold the build pending until then"
            ),
            TriggerRefusal::JobPaused => format!(
                "job {pipeline}/{job} is paused: unpause it first (hangar unpause-job -j \
                 {pipeline}/{job}); Concourse would hold the build pending until then"
            ),
            TriggerRefusal::ManualTriggerDisabled => format!(
                "job {pipeline}/{job} has disable_manual_trigger set: it runs only when its \
                 inputs trigger it"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_trigger_is_refused_for_the_first_reason_that_holds() {
        use TriggerRefusal::*;
        // (pipeline paused, job paused, manual trigger disabled, answer)
        let table = [
            (false, false, false, Ok(())),
            (true, false, false, Err(PipelinePaused)),
            (true, true, true, Err(PipelinePaused)),
            (false, true, false, Err(JobPaused)),
            (false, true, true, Err(JobPaused)),
            (false, false, true, Err(ManualTriggerDisabled)),
        ];
        for (pipeline_paused, job_paused, disable_manual_trigger, want) in table {
            let state = TriggerState {
                pipeline_paused,
                job_paused,
                disable_manual_trigger,
            };
            assert_eq!(manual_trigger(state), want, "{state:?}");
        }
    }

    #[test]
    fn each_refusal_names_the_job_and_what_to_do() {
        let words = TriggerRefusal::JobPaused.words("p/branch:main", "unit");
        assert!(
            words.contains("job p/branch:main/unit is paused"),
            "{words}"
        );
        assert!(
            words.contains("hangar unpause-job -j p/branch:main/unit"),
            "{words}"
        );
        let words = TriggerRefusal::PipelinePaused.words("p", "unit");
        assert!(words.contains("hangar unpause-pipeline -p p"), "{words}");
        let words = TriggerRefusal::ManualTriggerDisabled.words("p", "unit");
        assert!(words.contains("disable_manual_trigger"), "{words}");
    }
}
