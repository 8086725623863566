//! The worker agent's decisions between heartbeats, as a state machine:
//! where it stands with web ([`Leaving`]), and what each event (a
//! heartbeat due, a command's answer, a heartbeat's answer) makes it do.
//! The agent (`hangar-worker/src/agent.rs`) carries the acts out; every
//! choice is here, table-tested.

use crate::pressure::Pressure;

/// Where the agent stands with web.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leaving {
    No,
    /// Asked to land (SIGUSR1): finish what runs, then exit.
    Landing,
    /// Asked to retire (SIGUSR2): land, then leave the fleet.
    Retiring,
    /// Landed by itself under hard pressure; comes back when it clears.
    SelfLanding,
}

/// What to do when a heartbeat is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnTick {
    /// Send the heartbeat.
    Heartbeat,
    /// Near its memory or disk limit: land first (before the kernel or
    /// the kubelet kills it), then send the heartbeat.
    LandThenHeartbeat,
    /// The pressure it landed for is gone: register again to take work.
    Reregister,
}

pub fn on_tick(leaving: Leaving, pressure: Pressure) -> OnTick {
    match (leaving, pressure) {
        (Leaving::No, Pressure::Hard) => OnTick::LandThenHeartbeat,
        (Leaving::SelfLanding, Pressure::None) => OnTick::Reregister,
        _ => OnTick::Heartbeat,
    }
}

/// Where the agent stands after its land under pressure was answered.
pub fn after_self_land(leaving: Leaving, accepted: bool) -> Leaving {
    if accepted {
        Leaving::SelfLanding
    } else {
        leaving
    }
}

/// A command the agent's owner gave (from a signal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Land,
    Retire,
}

/// Where the agent stands after web answered `command`: `accepted` with
/// whether web removed the worker at once (nothing ran), or refused. The
/// agent ends (retired) when the worker is gone.
pub fn after_command(
    leaving: Leaving,
    command: Command,
    accepted: Option<bool>,
) -> (Leaving, Option<AgentEnd>) {
    match accepted {
        None => (leaving, None),
        Some(removed) => {
            let next = match command {
                Command::Land => Leaving::Landing,
                Command::Retire => Leaving::Retiring,
            };
            (next, removed.then_some(AgentEnd::Retired))
        }
    }
}

/// Web's answer to a heartbeat, as the agent tells it apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeartbeatAnswer {
    /// Accepted; `landed` when web says the worker has landed.
    Accepted { landed: bool },
    /// A newer registration of the name took over.
    Superseded,
    /// Web knows no such worker (removed, or retired as asked).
    NotFound,
    /// Web declared the worker stalled: register again.
    Reregister,
    /// Web or the network failed: try again next interval.
    Failed,
}

/// Why the agent ends (beside being stopped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentEnd {
    Landed,
    Retired,
    Superseded,
}

/// What to do after a heartbeat's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterHeartbeat {
    Continue,
    Reregister,
    End(AgentEnd),
}

pub fn after_heartbeat(leaving: Leaving, answer: HeartbeatAnswer) -> AfterHeartbeat {
    match answer {
        // Landed under pressure, it stays to come back.
        HeartbeatAnswer::Accepted { landed: true } if leaving != Leaving::SelfLanding => {
            AfterHeartbeat::End(AgentEnd::Landed)
        }
        HeartbeatAnswer::Accepted { .. } | HeartbeatAnswer::Failed => AfterHeartbeat::Continue,
        HeartbeatAnswer::Superseded => AfterHeartbeat::End(AgentEnd::Superseded),
        HeartbeatAnswer::NotFound if leaving == Leaving::Retiring => {
            AfterHeartbeat::End(AgentEnd::Retired)
        }
        HeartbeatAnswer::NotFound | HeartbeatAnswer::Reregister => AfterHeartbeat::Reregister,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Leaving; 4] = [
        Leaving::No,
        Leaving::Landing,
        Leaving::Retiring,
        Leaving::SelfLanding,
    ];

    #[test]
    fn a_due_heartbeat_lands_under_hard_pressure_and_comes_back_once_it_clears() {
        use Leaving::*;
        use OnTick::*;
        let table = [
            (No, Pressure::None, Heartbeat),
            (No, Pressure::Soft, Heartbeat),
            (No, Pressure::Hard, LandThenHeartbeat),
            (Landing, Pressure::Hard, Heartbeat),
            (Retiring, Pressure::Hard, Heartbeat),
            (SelfLanding, Pressure::Hard, Heartbeat),
            // Soft pressure is not cleared: it stays landed.
            (SelfLanding, Pressure::Soft, Heartbeat),
            (SelfLanding, Pressure::None, Reregister),
            (Landing, Pressure::None, Heartbeat),
            (Retiring, Pressure::None, Heartbeat),
        ];
        for (leaving, pressure, want) in table {
            assert_eq!(on_tick(leaving, pressure), want, "{leaving:?} {pressure:?}");
        }
        assert_eq!(after_self_land(No, true), SelfLanding);
        assert_eq!(after_self_land(No, false), No);
    }

    #[test]
    fn a_command_web_accepted_sets_where_the_agent_stands() {
        for leaving in ALL {
            assert_eq!(
                after_command(leaving, Command::Land, None),
                (leaving, None),
                "a refused command changes nothing"
            );
            assert_eq!(
                after_command(leaving, Command::Land, Some(false)),
                (Leaving::Landing, None)
            );
            assert_eq!(
                after_command(leaving, Command::Retire, Some(false)),
                (Leaving::Retiring, None)
            );
            assert_eq!(
                after_command(leaving, Command::Retire, Some(true)),
                (Leaving::Retiring, Some(AgentEnd::Retired))
            );
        }
    }

    #[test]
    fn a_heartbeat_s_answer_ends_re_registers_or_goes_on() {
        use AfterHeartbeat::*;
        use HeartbeatAnswer as A;
        use Leaving::*;
        let table = [
            (No, A::Accepted { landed: false }, Continue),
            (No, A::Accepted { landed: true }, End(AgentEnd::Landed)),
            (Landing, A::Accepted { landed: true }, End(AgentEnd::Landed)),
            (
                Retiring,
                A::Accepted { landed: true },
                End(AgentEnd::Landed),
            ),
            (SelfLanding, A::Accepted { landed: true }, Continue),
            (No, A::Superseded, End(AgentEnd::Superseded)),
            (SelfLanding, A::Superseded, End(AgentEnd::Superseded)),
            (Retiring, A::NotFound, End(AgentEnd::Retired)),
            (No, A::NotFound, Reregister),
            (Landing, A::NotFound, Reregister),
            (SelfLanding, A::NotFound, Reregister),
            (No, A::Reregister, Reregister),
            (Retiring, A::Reregister, Reregister),
            (No, A::Failed, Continue),
            (Retiring, A::Failed, Continue),
        ];
        for (leaving, answer, want) in table {
            assert_eq!(
                after_heartbeat(leaving, answer),
                want,
                "{leaving:?} {answer:?}"
            );
        }
    }
}
