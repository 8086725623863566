//! The `time` type, with the semantics of Concourse's time resource:
//! versions are moments, a new one whenever the source's interval, window
//! and days allow it.
//!
//! source (Concourse's fields): `{"interval": "1h30m"?, "location":
//! "Europe/Paris"?, "start": "8:00 PM"?, "stop": "9:00 PM"?, "days":
//! ["Monday", …]?, "initial_version": bool?, "start_after":
//! "2024-06-01T09:00"?}`; version: `{"time": <RFC 3339>}`, such as
//! `2024-06-01T20:05:03.123456789+02:00` (Go's format: the fraction without
//! trailing zeros, the offset of `location` at that moment).
//!
//! - `check` answers the given version, then the current time when a new
//!   version is due ([`check_versions`]).
//! - `in <dest>` writes `input` (the request's source and version as JSON),
//!   `timestamp` (the version's time as Go prints it,
//!   `2006-01-02 15:04:05.999999999 -0700 MST`) and `epoch` (its Unix
//!   seconds), and answers the version as given.
//! - `out` answers the current time. Neither `in` nor `out` takes params.
//!
//! Every field is checked before anything else happens: an unknown field,
//! a malformed duration or time of day, an unknown time zone or day, an
//! interval of 0 or beyond Go's longest duration, `start` without `stop`
//! are refused, naming the field.
//!
//! Local times are read in `location` (UTC by default). A local time that
//! does not exist (the clocks skipped it) is taken as the moment after the
//! skip, one that happens twice as its first occurrence.

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::{Offset, TimeZone};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::{parse_request, shorten, Call, CheckRequest, InRequest, NoParams, OutRequest};

/// Go's longest duration, `2562047h47m16.854775807s`: Concourse's type
/// cannot take a longer interval either.
const MAX_INTERVAL_NANOS: u128 = i64::MAX as u128;

const MINUTES_A_DAY: u16 = 24 * 60;

/// The source as given. Written back into `in`'s `input` file as it came,
/// less the fields that were null.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Source {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_version: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_after: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Version {
    pub time: String,
}

/// A source, checked and read.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// In nanoseconds: more than 0, at most [`MAX_INTERVAL_NANOS`].
    pub interval: Option<u64>,
    pub zone: TimeZone,
    /// `start` and `stop`, in minutes after midnight in `zone`.
    pub window: Option<(u16, u16)>,
    /// The days a version may be made on, a bit each from Sunday (bit 0);
    /// 0 for any day.
    pub days: u8,
    pub initial_version: bool,
    /// No version is made until this local time has passed.
    pub start_after: Option<DateTime>,
}

impl Source {
    pub(crate) fn settings(&self) -> Result<Settings, String> {
        let interval = match &self.interval {
            Some(text) => {
                Some(parse_interval(text).map_err(|why| format!("source.interval: {why}"))?)
            }
            None => None,
        };
        let zone = match &self.location {
            Some(name) => parse_location(name).map_err(|why| format!("source.location: {why}"))?,
            None => TimeZone::UTC,
        };
        let window = match (&self.start, &self.stop) {
            (Some(start), Some(stop)) => Some((
                parse_time_of_day(start).map_err(|why| format!("source.start: {why}"))?,
                parse_time_of_day(stop).map_err(|why| format!("source.stop: {why}"))?,
            )),
            (Some(_), None) => {
                return Err("source.start: needs source.stop too (the end of the window)".into())
            }
            (None, Some(_)) => {
                return Err("source.stop: needs source.start too (the start of the window)".into())
            }
            (None, None) => None,
        };
        let mut days = 0u8;
        for (i, name) in self.days.iter().flatten().enumerate() {
            let day = parse_day(name).ok_or_else(|| {
                format!(
                    "source.days[{i}]: {:?} is not a day (Sunday, Monday, Tuesday, \
                     Wednesday, Thursday, Friday or Saturday)",
                    shorten(name)
                )
            })?;
            days |= 1 << day;
        }
        let start_after = match &self.start_after {
            Some(text) => {
                Some(parse_start_after(text).map_err(|why| format!("source.start_after: {why}"))?)
            }
            None => None,
        };
        Ok(Settings {
            interval,
            zone,
            window,
            days,
            initial_version: self.initial_version.unwrap_or(false),
            start_after,
        })
    }
}

/// The versions `check` answers at `now`, after the version `previous`
/// (as given, and the moment it names), as Concourse's time resource
/// answers them:
///
/// - without a previous version and with `initial_version`, the current
///   time, whatever the window and days;
/// - otherwise the previous version, if any, then the current time when a
///   new version is due: today is one of `days` (in `location`), the local
///   time `start_after` has passed, now is in the window (`start` included,
///   `stop` not; a window whose `stop` is not after its `start` ends the
///   next day; no window is the whole day from midnight), and there is no
///   previous version, or `interval` has passed since it, or (with no
///   interval) it is older than the start of the current window: one
///   version a window, one a day without one.
///
/// A previous version far in the past gives one new version, not one for
/// each interval missed. A previous version later than `now` (the clock
/// went back) gives none until the interval has passed after it, or (with
/// no interval) until a window opens after it.
pub(crate) fn check_versions(
    settings: &Settings,
    previous: Option<(&str, Timestamp)>,
    now: Timestamp,
) -> Result<Vec<String>, String> {
    let mut versions = Vec::new();
    match previous {
        Some((text, _)) => versions.push(text.to_string()),
        None if settings.initial_version => {
            return Ok(vec![format_version(now, &settings.zone)]);
        }
        None => {}
    }
    if due(settings, previous.map(|(_, at)| at), now)? {
        versions.push(format_version(now, &settings.zone));
    }
    Ok(versions)
}

/// Whether a new version is due at `now`.
fn due(settings: &Settings, previous: Option<Timestamp>, now: Timestamp) -> Result<bool, String> {
    let zone = &settings.zone;
    let local = zone.to_datetime(now);
    if settings.days != 0 && settings.days & (1 << local.weekday().to_sunday_zero_offset()) == 0 {
        return Ok(false);
    }
    if let Some(after) = settings.start_after {
        if resolve(zone, after)? >= now {
            return Ok(false);
        }
    }
    let (start, stop) = window_around(settings, local.date(), now)?;
    if now < start || now >= stop {
        return Ok(false);
    }
    Ok(match (previous, settings.interval) {
        (None, _) => true,
        (Some(previous), Some(interval)) => {
            now.as_nanosecond() - previous.as_nanosecond() >= i128::from(interval)
        }
        (Some(previous), None) => previous < start,
    })
}

/// The window that started last at or before `now` (whose local date is
/// `today`): its start and its end.
fn window_around(
    settings: &Settings,
    today: Date,
    now: Timestamp,
) -> Result<(Timestamp, Timestamp), String> {
    let zone = &settings.zone;
    let (start_minute, stop_minute) = settings.window.unwrap_or((0, 0));
    let at = |day: Date, minute: u16| resolve(zone, day.to_datetime(time_of_day(minute)));
    let mut day = today;
    let mut start = at(day, start_minute)?;
    if start > now {
        day = day.yesterday().map_err(|e| format!("time: {e}"))?;
        start = at(day, start_minute)?;
    }
    let stop_day = if stop_minute > start_minute {
        day
    } else {
        day.tomorrow().map_err(|e| format!("time: {e}"))?
    };
    let mut stop = at(stop_day, stop_minute)?;
    if stop <= start {
        // The clocks skipped the window's start past its stop: it lasts as
        // long as it does on the clock, from the moment after the skip.
        let minutes = (stop_minute + MINUTES_A_DAY - start_minute) % MINUTES_A_DAY;
        stop = Timestamp::from_nanosecond(
            start.as_nanosecond() + i128::from(minutes) * 60 * 1_000_000_000,
        )
        .map_err(|e| format!("time: {e}"))?;
    }
    Ok((start, stop))
}

fn time_of_day(minute: u16) -> Time {
    Time::new((minute / 60) as i8, (minute % 60) as i8, 0, 0).expect("minutes of a day")
}

/// The moment a local time names: after a skip of the clocks for one
/// that does not exist, the first of two for one that happens twice.
fn resolve(zone: &TimeZone, local: DateTime) -> Result<Timestamp, String> {
    zone.to_ambiguous_timestamp(local)
        .compatible()
        .map_err(|e| format!("time: {e}"))
}

/// `at` as Go writes a time in JSON (RFC 3339, nanoseconds without
/// trailing zeros), in `zone`'s offset at that moment; in UTC if that
/// offset is not whole minutes, which RFC 3339 cannot say.
pub(crate) fn format_version(at: Timestamp, zone: &TimeZone) -> String {
    let mut offset = zone.to_offset(at);
    if offset.seconds() % 60 != 0 {
        offset = Offset::UTC;
    }
    let local = offset.to_datetime(at);
    let mut text = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{}",
        local.year(),
        local.month(),
        local.day(),
        local.hour(),
        local.minute(),
        local.second(),
        fraction(local.subsec_nanosecond()),
    );
    let seconds = offset.seconds();
    if seconds == 0 {
        text.push('Z');
    } else {
        let sign = if seconds < 0 { '-' } else { '+' };
        let minutes = seconds.unsigned_abs() / 60;
        text.push_str(&format!("{sign}{:02}:{:02}", minutes / 60, minutes % 60));
    }
    text
}

/// `.123` for 123 ms, nothing for 0: Go's `.999999999`.
fn fraction(nanos: i32) -> String {
    if nanos == 0 {
        return String::new();
    }
    let digits = format!(".{nanos:09}");
    digits.trim_end_matches('0').to_string()
}

/// A version's time: RFC 3339 (`2006-01-02T15:04:05Z`,
/// `2006-01-02T15:04:05.5+02:00`) as Go reads it. Returns the moment and
/// the offset it was written in.
pub(crate) fn parse_version_time(text: &str) -> Result<(Timestamp, Offset), String> {
    parse_rfc3339(text).ok_or_else(|| {
        format!(
            "{:?} is not a time (RFC 3339, such as 2024-06-01T20:05:03Z or \
             2024-06-01T20:05:03.5+02:00)",
            shorten(text)
        )
    })
}

fn parse_rfc3339(text: &str) -> Option<(Timestamp, Offset)> {
    let b = text.as_bytes();
    if b.len() < 20
        || [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')]
            .iter()
            .any(|&(i, c)| b[i] != c)
    {
        return None;
    }
    let number = |from: usize, to: usize| -> Option<i32> {
        let digits = &b[from..to];
        digits
            .iter()
            .all(u8::is_ascii_digit)
            .then(|| digits.iter().fold(0, |n, d| n * 10 + i32::from(d - b'0')))
    };
    let (year, month, day) = (number(0, 4)?, number(5, 7)?, number(8, 10)?);
    let (hour, minute, second) = (number(11, 13)?, number(14, 16)?, number(17, 19)?);
    // The first 19 bytes are ASCII: 19 is a character boundary.
    let mut rest = &text[19..];
    let mut nanos = 0;
    if let Some(after_dot) = rest.strip_prefix('.') {
        let count = after_dot.bytes().take_while(u8::is_ascii_digit).count();
        if count == 0 {
            return None;
        }
        // Go keeps nanoseconds and drops any further digits.
        for (i, d) in after_dot
            .bytes()
            .take(9)
            .take_while(u8::is_ascii_digit)
            .enumerate()
        {
            nanos += i32::from(d - b'0') * 10i32.pow(8 - i as u32);
        }
        rest = &after_dot[count..];
    }
    let offset_seconds = match rest.as_bytes() {
        [b'Z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2]
            if [h1, h2, m1, m2].iter().all(|d| d.is_ascii_digit()) =>
        {
            let hours = i32::from(h1 - b'0') * 10 + i32::from(h2 - b'0');
            let minutes = i32::from(m1 - b'0') * 10 + i32::from(m2 - b'0');
            if hours > 23 || minutes > 59 {
                return None;
            }
            let seconds = hours * 3600 + minutes * 60;
            if *sign == b'-' {
                -seconds
            } else {
                seconds
            }
        }
        _ => return None,
    };
    let local = DateTime::new(
        year as i16,
        month as i8,
        day as i8,
        hour as i8,
        minute as i8,
        second as i8,
        nanos,
    )
    .ok()?;
    let offset = Offset::from_seconds(offset_seconds).ok()?;
    let at = offset.to_timestamp(local).ok()?;
    Some((at, offset))
}

/// `at` as Go prints it with `2006-01-02 15:04:05.999999999 -0700 MST`
/// (what Concourse's type writes into `timestamp`): in the offset the
/// version was written in, named `UTC` when that is 0 and by its digits
/// otherwise, as Go names a zone it only knows the offset of.
pub(crate) fn format_timestamp_file(at: Timestamp, offset: Offset) -> String {
    let local = offset.to_datetime(at);
    let seconds = offset.seconds();
    let sign = if seconds < 0 { '-' } else { '+' };
    let minutes = seconds.unsigned_abs() / 60;
    let numeric = format!("{sign}{:02}{:02}", minutes / 60, minutes % 60);
    let name = if seconds == 0 { "UTC" } else { &numeric };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}{} {numeric} {name}",
        local.year(),
        local.month(),
        local.day(),
        local.hour(),
        local.minute(),
        local.second(),
        fraction(local.subsec_nanosecond()),
    )
}

/// A duration as Go's `time.ParseDuration` reads it (`90s`, `1h30m`,
/// `1.5h`; units `ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), more than 0 and at
/// most Go's longest: nanoseconds.
pub(crate) fn parse_interval(text: &str) -> Result<u64, String> {
    let shown = shorten(text);
    let not_a_duration = || {
        format!(
            "{shown:?} is not a duration (numbers with units ns, us, ms, s, m or h: \
             90s, 1h30m, 1.5h)"
        )
    };
    let too_long =
        || format!("{shown:?} is longer than the longest interval, 2562047h47m16.854775807s");
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.starts_with('-') {
        return Err(format!("{shown:?} is negative: it must be more than 0"));
    }
    if rest.is_empty() {
        return Err(not_a_duration());
    }
    let mut total: u128 = 0;
    if rest != "0" {
        while !rest.is_empty() {
            let whole_len = rest.bytes().take_while(u8::is_ascii_digit).count();
            let (whole, after) = rest.split_at(whole_len);
            let (fraction, after) = match after.strip_prefix('.') {
                Some(after_dot) => {
                    after_dot.split_at(after_dot.bytes().take_while(u8::is_ascii_digit).count())
                }
                None => ("", after),
            };
            if whole.is_empty() && fraction.is_empty() {
                return Err(not_a_duration());
            }
            let unit_len = after
                .find(|c: char| c.is_ascii_digit() || c == '.')
                .unwrap_or(after.len());
            let (unit, after) = after.split_at(unit_len);
            let unit_nanos: u128 = match unit {
                "ns" => 1,
                "us" | "µs" | "μs" => 1_000,
                "ms" => 1_000_000,
                "s" => 1_000_000_000,
                "m" => 60_000_000_000,
                "h" => 3_600_000_000_000,
                "" => {
                    return Err(format!(
                        "{shown:?} has a number without a unit (ns, us, ms, s, m or h)"
                    ))
                }
                other => {
                    return Err(format!(
                        "{shown:?} has an unknown unit {:?} (ns, us, ms, s, m or h)",
                        shorten(other)
                    ))
                }
            };
            // More digits than this is longer than the longest anyway.
            if whole.trim_start_matches('0').len() > 20 {
                return Err(too_long());
            }
            let whole: u128 = if whole.is_empty() {
                0
            } else {
                whole.parse().map_err(|_| not_a_duration())?
            };
            let mut part = whole * unit_nanos;
            // Digits past the twentieth are below a nanosecond of any unit.
            let fraction = &fraction[..fraction.len().min(20)];
            if !fraction.is_empty() {
                let digits: u128 = fraction.parse().map_err(|_| not_a_duration())?;
                part += digits * unit_nanos / 10u128.pow(fraction.len() as u32);
            }
            total += part;
            if total > MAX_INTERVAL_NANOS {
                return Err(too_long());
            }
            rest = after;
        }
    }
    if total == 0 {
        return Err(format!("{shown:?} is 0: it must be more than 0"));
    }
    Ok(total as u64)
}

/// A time zone of the tz database. Empty, `UTC` and `Local` are UTC, as in
/// Concourse's type (whose container's own zone is UTC).
fn parse_location(name: &str) -> Result<TimeZone, String> {
    if name.is_empty() || name == "UTC" || name == "Local" {
        return Ok(TimeZone::UTC);
    }
    let refused = || {
        format!(
            "{:?} is not a time zone of the tz database (such as UTC, Europe/Paris, \
             America/New_York)",
            shorten(name)
        )
    };
    if name.len() > 256 || name.chars().any(|c| c.is_control()) {
        return Err(refused());
    }
    jiff::tz::db().get(name).map_err(|_| refused())
}

/// A time of day in one of Concourse's formats: `3:04 PM`, `3PM`, `3 PM`,
/// `15:04`, `1504`, each optionally followed by an offset ` -0700`, which
/// makes it that time in UTC (Concourse's deprecated form). Minutes after
/// midnight.
pub(crate) fn parse_time_of_day(text: &str) -> Result<u16, String> {
    let refused = || {
        format!(
            "{:?} is not a time of day (3:04 PM, 3PM, 3 PM, 15:04 or 1504, \
             optionally followed by an offset such as -0700)",
            shorten(text)
        )
    };
    let (clock, offset_minutes) = match text.rsplit_once(' ') {
        Some((clock, offset)) if offset.starts_with(['+', '-']) => (
            clock,
            Some(parse_numeric_offset(offset).ok_or_else(refused)?),
        ),
        _ => (text, None),
    };
    let minutes = parse_clock(clock).ok_or_else(refused)?;
    let in_utc =
        (i32::from(minutes) - offset_minutes.unwrap_or(0)).rem_euclid(i32::from(MINUTES_A_DAY));
    Ok(in_utc as u16)
}

/// `-0700`: minutes east of UTC.
fn parse_numeric_offset(text: &str) -> Option<i32> {
    let (sign, digits) = match text.as_bytes() {
        [b'+', rest @ ..] => (1, rest),
        [b'-', rest @ ..] => (-1, rest),
        _ => return None,
    };
    if digits.len() != 4 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = |i: usize| i32::from(digits[i] - b'0');
    let (hours, minutes) = (n(0) * 10 + n(1), n(2) * 10 + n(3));
    (hours <= 23 && minutes <= 59).then_some(sign * (hours * 60 + minutes))
}

/// The clock part of a time of day: minutes after midnight.
fn parse_clock(text: &str) -> Option<u16> {
    let (body, pm) = if let Some(body) = text.strip_suffix("PM") {
        (body, Some(true))
    } else if let Some(body) = text.strip_suffix("AM") {
        (body, Some(false))
    } else {
        (text, None)
    };
    let hour_and_minute = |s: &str| -> Option<(u16, u16)> {
        let (hour, minute) = s.split_once(':')?;
        Some((hour_digits(hour)?, minute_digits(minute)?))
    };
    let (hour, minute) = match pm {
        Some(pm) => {
            // `3:04 PM` and `3 PM` have a space, `3PM` none.
            let (hour, minute) = match body.strip_suffix(' ') {
                Some(spaced) if spaced.contains(':') => hour_and_minute(spaced)?,
                Some(spaced) => (hour_digits(spaced)?, 0),
                None => (hour_digits(body)?, 0),
            };
            if hour > 12 {
                return None;
            }
            // 12 AM is midnight, 12 PM noon.
            match (pm, hour) {
                (true, h) if h < 12 => (h + 12, minute),
                (false, 12) => (0, minute),
                (_, h) => (h, minute),
            }
        }
        None if body.contains(':') => hour_and_minute(body)?,
        None if body.len() == 4 => (hour_digits(&body[..2])?, minute_digits(&body[2..])?),
        None => return None,
    };
    (hour < 24).then_some(hour * 60 + minute)
}

/// One or two digits.
fn hour_digits(s: &str) -> Option<u16> {
    if !matches!(s.len(), 1 | 2) || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Exactly two digits, under 60.
fn minute_digits(s: &str) -> Option<u16> {
    if s.len() != 2 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok().filter(|m| *m < 60)
}

/// Sunday is 0. Full names and three-letter ones, in any case, as
/// Concourse's type reads them.
fn parse_day(name: &str) -> Option<u8> {
    let day = match name.to_ascii_lowercase().as_str() {
        "sun" | "sunday" => 0,
        "mon" | "monday" => 1,
        "tue" | "tuesday" => 2,
        "wed" | "wednesday" => 3,
        "thu" | "thursday" => 4,
        "fri" | "friday" => 5,
        "sat" | "saturday" => 6,
        _ => return None,
    };
    Some(day)
}

/// `start_after`'s formats: `2006-01-02T15:04:05`, `2006-01-02 15:04:05`,
/// `2006-01-02T15:04`, `2006-01-02T15`, `2006-01-02`.
fn parse_start_after(text: &str) -> Result<DateTime, String> {
    let refused = || {
        format!(
            "{:?} is not a date and time (2006-01-02T15:04:05, 2006-01-02 15:04:05, \
             2006-01-02T15:04, 2006-01-02T15 or 2006-01-02)",
            shorten(text)
        )
    };
    let b = text.as_bytes();
    let digits = |from: usize, to: usize| -> Option<i16> {
        let d = b.get(from..to)?;
        d.iter()
            .all(u8::is_ascii_digit)
            .then(|| d.iter().fold(0, |n, d| n * 10 + i16::from(d - b'0')))
    };
    let shape_ok = match b.len() {
        10 => true,
        13 => b[10] == b'T',
        16 => b[10] == b'T' && b[13] == b':',
        19 => (b[10] == b'T' || b[10] == b' ') && b[13] == b':' && b[16] == b':',
        _ => false,
    } && b.get(4) == Some(&b'-')
        && b.get(7) == Some(&b'-');
    if !shape_ok {
        return Err(refused());
    }
    let field = |from: usize| -> Result<i16, String> {
        if from >= b.len() {
            Ok(0)
        } else {
            digits(from, from + 2).ok_or_else(refused)
        }
    };
    let year = digits(0, 4).ok_or_else(refused)?;
    let (month, day) = (field(5)?, field(8)?);
    let (hour, minute, second) = (field(11)?, field(14)?, field(17)?);
    DateTime::new(
        year,
        month as i8,
        day as i8,
        hour as i8,
        minute as i8,
        second as i8,
        0,
    )
    .map_err(|_| refused())
}

fn parse_version(version: &Version) -> Result<(Timestamp, Offset), String> {
    parse_version_time(&version.time).map_err(|why| format!("version.time: {why}"))
}

pub(crate) fn check(call: Call<'_>) -> Result<Value, String> {
    let request: CheckRequest<Source, Version> = parse_request(call.request)?;
    let settings = request.source.settings()?;
    let previous = match &request.version {
        Some(version) => Some((version.time.as_str(), parse_version(version)?.0)),
        None => None,
    };
    let versions = check_versions(&settings, previous, Timestamp::now())?;
    Ok(Value::Array(
        versions
            .into_iter()
            .map(|time| json!({ "time": time }))
            .collect(),
    ))
}

pub(crate) fn get(call: Call<'_>) -> Result<Value, String> {
    let request: InRequest<Source, Version, NoParams> = parse_request(call.request)?;
    request.source.settings()?;
    let (at, offset) = parse_version(&request.version)?;
    let dest = call.dir.expect("in has a directory");
    let text = &request.version.time;
    std::fs::create_dir_all(dest).map_err(|e| format!("create {}: {e}", dest.display()))?;
    let input = json!({ "source": request.source, "version": { "time": text } });
    let epoch = at.as_nanosecond().div_euclid(1_000_000_000);
    for (name, content) in [
        ("input", format!("{input}\n")),
        ("timestamp", format_timestamp_file(at, offset)),
        ("epoch", epoch.to_string()),
    ] {
        let path = dest.join(name);
        std::fs::write(&path, content).map_err(|e| format!("write {}: {e}", path.display()))?;
    }
    let _ = writeln!(call.log, "time: {text}");
    Ok(json!({ "version": { "time": text }, "metadata": [] }))
}

pub(crate) fn put(call: Call<'_>) -> Result<Value, String> {
    let request: OutRequest<Source, NoParams> = parse_request(call.request)?;
    let settings = request.source.settings()?;
    let time = format_version(Timestamp::now(), &settings.zone);
    Ok(json!({ "version": { "time": time }, "metadata": [] }))
}

#[cfg(test)]
mod tests;
