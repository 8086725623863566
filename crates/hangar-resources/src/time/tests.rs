use serde_json::json;

use super::*;

fn settings(source: Value) -> Settings {
    let source: Source =
        serde_json::from_value(source.clone()).unwrap_or_else(|e| panic!("{source}: {e}"));
    source
        .settings()
        .unwrap_or_else(|e| panic!("{source:?}: {e}"))
}

fn at(text: &str) -> Timestamp {
    parse_version_time(text).unwrap().0
}

/// What, source, previous version, now, expected answer.
type CheckCase = (
    &'static str,
    Value,
    Option<&'static str>,
    &'static str,
    &'static [&'static str],
);

/// 2024-06-03 is a Monday; 2024-03-10 and 2024-11-03 are the days New
/// York's clocks go forward and back.
#[test]
fn check_answers_the_versions_concourse_would_at_any_moment() {
    let cases: &[CheckCase] = &[
        // Interval only.
        (
            "first check",
            json!({"interval": "1m"}),
            None,
            "2024-06-03T12:00:00Z",
            &["2024-06-03T12:00:00Z"],
        ),
        (
            "interval not passed",
            json!({"interval": "1m"}),
            Some("2024-06-03T11:59:30Z"),
            "2024-06-03T12:00:00Z",
            &["2024-06-03T11:59:30Z"],
        ),
        (
            "interval just passed",
            json!({"interval": "1m"}),
            Some("2024-06-03T11:59:00Z"),
            "2024-06-03T12:00:00Z",
            &["2024-06-03T11:59:00Z", "2024-06-03T12:00:00Z"],
        ),
        (
            "a nanosecond short",
            json!({"interval": "1m"}),
            Some("2024-06-03T11:59:00.000000001Z"),
            "2024-06-03T12:00:00Z",
            &["2024-06-03T11:59:00.000000001Z"],
        ),
        (
            "hours and minutes",
            json!({"interval": "1h30m"}),
            Some("2024-06-03T10:30:00Z"),
            "2024-06-03T12:00:00.25Z",
            &["2024-06-03T10:30:00Z", "2024-06-03T12:00:00.25Z"],
        ),
        (
            "a previous version far in the past: one new version",
            json!({"interval": "5m"}),
            Some("2001-01-01T00:00:00Z"),
            "2024-06-03T12:00:00Z",
            &["2001-01-01T00:00:00Z", "2024-06-03T12:00:00Z"],
        ),
        (
            "the clock went back",
            json!({"interval": "1m"}),
            Some("2024-06-03T12:30:00Z"),
            "2024-06-03T12:00:00Z",
            &["2024-06-03T12:30:00Z"],
        ),
        (
            "the previous version's own offset is kept as written",
            json!({"interval": "1m"}),
            Some("2024-06-03T13:00:00+02:00"),
            "2024-06-03T12:00:00Z",
            &["2024-06-03T13:00:00+02:00", "2024-06-03T12:00:00Z"],
        ),
        // Neither interval nor window: once a day, from midnight.
        (
            "daily, yesterday's version",
            json!({}),
            Some("2024-06-02T23:59:59Z"),
            "2024-06-03T00:00:00Z",
            &["2024-06-02T23:59:59Z", "2024-06-03T00:00:00Z"],
        ),
        (
            "daily, today's version",
            json!({}),
            Some("2024-06-03T00:00:00Z"),
            "2024-06-03T23:59:59Z",
            &["2024-06-03T00:00:00Z"],
        ),
        (
            "daily, the clock went back a day",
            json!({}),
            Some("2024-06-04T08:00:00Z"),
            "2024-06-03T12:00:00Z",
            &["2024-06-04T08:00:00Z"],
        ),
        (
            "daily, far in the past",
            json!({}),
            Some("1999-12-31T23:00:00Z"),
            "2024-06-03T12:00:00Z",
            &["1999-12-31T23:00:00Z", "2024-06-03T12:00:00Z"],
        ),
        // A window within the day.
        (
            "before the window",
            json!({"start": "9:00 AM", "stop": "5:00 PM"}),
            None,
            "2024-06-03T08:59:59.999Z",
            &[],
        ),
        (
            "start is in the window",
            json!({"start": "9:00 AM", "stop": "5:00 PM"}),
            None,
            "2024-06-03T09:00:00Z",
            &["2024-06-03T09:00:00Z"],
        ),
        (
            "stop is not",
            json!({"start": "9:00 AM", "stop": "5:00 PM"}),
            None,
            "2024-06-03T17:00:00Z",
            &[],
        ),
        (
            "after the window, a version from it",
            json!({"start": "9:00 AM", "stop": "5:00 PM"}),
            Some("2024-06-03T09:00:00Z"),
            "2024-06-03T18:00:00Z",
            &["2024-06-03T09:00:00Z"],
        ),
        (
            "one version a window",
            json!({"start": "0900", "stop": "1700"}),
            Some("2024-06-03T09:30:00Z"),
            "2024-06-03T16:00:00Z",
            &["2024-06-03T09:30:00Z"],
        ),
        (
            "the next day's window",
            json!({"start": "09:00", "stop": "17:00"}),
            Some("2024-06-02T16:59:00Z"),
            "2024-06-03T10:00:00Z",
            &["2024-06-02T16:59:00Z", "2024-06-03T10:00:00Z"],
        ),
        (
            "an interval within a window",
            json!({"start": "9AM", "stop": "5PM", "interval": "10m"}),
            Some("2024-06-03T09:30:00Z"),
            "2024-06-03T09:45:00Z",
            &["2024-06-03T09:30:00Z", "2024-06-03T09:45:00Z"],
        ),
        (
            "an interval within a window, not passed",
            json!({"start": "9 AM", "stop": "5 PM", "interval": "10m"}),
            Some("2024-06-03T09:30:00Z"),
            "2024-06-03T09:35:00Z",
            &["2024-06-03T09:30:00Z"],
        ),
        (
            "an interval passed, outside the window",
            json!({"start": "9 AM", "stop": "5 PM", "interval": "10m"}),
            Some("2024-06-03T16:55:00Z"),
            "2024-06-03T17:30:00Z",
            &["2024-06-03T16:55:00Z"],
        ),
        // A window across midnight.
        (
            "across midnight, before it",
            json!({"start": "10:00 PM", "stop": "2:00 AM"}),
            None,
            "2024-06-03T23:00:00Z",
            &["2024-06-03T23:00:00Z"],
        ),
        (
            "across midnight, after it",
            json!({"start": "10:00 PM", "stop": "2:00 AM"}),
            None,
            "2024-06-04T01:59:00Z",
            &["2024-06-04T01:59:00Z"],
        ),
        (
            "across midnight, past its stop",
            json!({"start": "10:00 PM", "stop": "2:00 AM"}),
            None,
            "2024-06-04T02:00:00Z",
            &[],
        ),
        (
            "across midnight, before its start",
            json!({"start": "10:00 PM", "stop": "2:00 AM"}),
            None,
            "2024-06-03T21:59:00Z",
            &[],
        ),
        (
            "across midnight, the same window as yesterday evening's version",
            json!({"start": "22:00", "stop": "02:00"}),
            Some("2024-06-03T22:30:00Z"),
            "2024-06-04T01:30:00Z",
            &["2024-06-03T22:30:00Z"],
        ),
        (
            "across midnight, the next window",
            json!({"start": "22:00", "stop": "02:00"}),
            Some("2024-06-04T01:30:00Z"),
            "2024-06-04T22:05:00Z",
            &["2024-06-04T01:30:00Z", "2024-06-04T22:05:00Z"],
        ),
        (
            "start equal to stop is a whole day from start",
            json!({"start": "6:00 AM", "stop": "6:00 AM"}),
            Some("2024-06-03T07:00:00Z"),
            "2024-06-04T05:59:00Z",
            &["2024-06-03T07:00:00Z"],
        ),
        (
            "start equal to stop, the next day",
            json!({"start": "6:00 AM", "stop": "6:00 AM"}),
            Some("2024-06-03T07:00:00Z"),
            "2024-06-04T06:00:00Z",
            &["2024-06-03T07:00:00Z", "2024-06-04T06:00:00Z"],
        ),
        (
            "an offset on the times makes them UTC",
            json!({"start": "3PM -0700", "stop": "4PM -0700"}),
            None,
            "2024-06-03T22:30:00Z",
            &["2024-06-03T22:30:00Z"],
        ),
        // Days.
        (
            "on one of the days",
            json!({"days": ["Monday", "Wednesday"]}),
            None,
            "2024-06-03T12:00:00Z",
            &["2024-06-03T12:00:00Z"],
        ),
        (
            "not on the days",
            json!({"days": ["Monday", "Wednesday"], "interval": "1m"}),
            Some("2024-06-03T12:00:00Z"),
            "2024-06-04T12:00:00Z",
            &["2024-06-03T12:00:00Z"],
        ),
        (
            "short day names in any case",
            json!({"days": ["mon", "WED"]}),
            Some("2024-06-04T12:00:00Z"),
            "2024-06-05T00:00:00Z",
            &["2024-06-04T12:00:00Z", "2024-06-05T00:00:00Z"],
        ),
        (
            "the day is the location's",
            json!({"days": ["Sunday"], "location": "Asia/Tokyo"}),
            None,
            "2024-06-01T23:30:00Z",
            &["2024-06-02T08:30:00+09:00"],
        ),
        (
            "not the location's day",
            json!({"days": ["Saturday"], "location": "Asia/Tokyo"}),
            None,
            "2024-06-01T23:30:00Z",
            &[],
        ),
        (
            "the day is now's, not the window's start's",
            json!({"days": ["Monday"], "start": "10 PM", "stop": "2 AM"}),
            None,
            "2024-06-04T01:00:00Z",
            &[],
        ),
        // Locations.
        (
            "in the window in summer time",
            json!({"start": "9:00 AM", "stop": "10:00 AM", "location": "America/New_York"}),
            None,
            "2024-07-01T13:30:00Z",
            &["2024-07-01T09:30:00-04:00"],
        ),
        (
            "in the window in winter time",
            json!({"start": "9:00 AM", "stop": "10:00 AM", "location": "America/New_York"}),
            None,
            "2024-01-15T14:30:00Z",
            &["2024-01-15T09:30:00-05:00"],
        ),
        (
            "before the window in winter time (in it by summer time's offset)",
            json!({"start": "9:00 AM", "stop": "10:00 AM", "location": "America/New_York"}),
            None,
            "2024-01-15T13:30:00Z",
            &[],
        ),
        (
            "daily in a half-hour zone: a new local day",
            json!({"location": "Asia/Kolkata"}),
            Some("2024-06-03T23:30:00+05:30"),
            "2024-06-03T18:31:00Z",
            &["2024-06-03T23:30:00+05:30", "2024-06-04T00:01:00+05:30"],
        ),
        (
            "daily in a half-hour zone: the same local day",
            json!({"location": "Asia/Kolkata"}),
            Some("2024-06-03T18:31:00Z"),
            "2024-06-04T18:29:00Z",
            &["2024-06-03T18:31:00Z"],
        ),
        (
            "a window the clocks skip opens when they land (3:00 EDT)",
            json!({"start": "2:00 AM", "stop": "3:00 AM", "location": "America/New_York"}),
            Some("2024-03-09T07:30:00Z"),
            "2024-03-10T07:30:00Z",
            &["2024-03-09T07:30:00Z", "2024-03-10T03:30:00-04:00"],
        ),
        (
            "and lasts an hour as on the clock",
            json!({"start": "2:00 AM", "stop": "3:00 AM", "location": "America/New_York",
                   "interval": "1m"}),
            Some("2024-03-10T07:30:00Z"),
            "2024-03-10T08:00:00Z",
            &["2024-03-10T07:30:00Z"],
        ),
        (
            "a window the clocks pass twice gives one version",
            json!({"start": "1:00 AM", "stop": "2:00 AM", "location": "America/New_York"}),
            Some("2024-11-03T01:30:00-04:00"),
            "2024-11-03T06:30:00Z",
            &["2024-11-03T01:30:00-04:00"],
        ),
        (
            "and lasts until the second 2:00",
            json!({"start": "1:00 AM", "stop": "2:00 AM", "location": "America/New_York",
                   "interval": "30m"}),
            Some("2024-11-03T01:30:00-04:00"),
            "2024-11-03T06:30:00Z",
            &["2024-11-03T01:30:00-04:00", "2024-11-03T01:30:00-05:00"],
        ),
        // initial_version.
        (
            "initial_version outside the window",
            json!({"start": "9 AM", "stop": "10 AM", "initial_version": true}),
            None,
            "2024-06-03T20:00:00Z",
            &["2024-06-03T20:00:00Z"],
        ),
        (
            "initial_version on a day not listed",
            json!({"days": ["Friday"], "initial_version": true, "location": "Europe/Paris"}),
            None,
            "2024-06-03T20:00:00Z",
            &["2024-06-03T22:00:00+02:00"],
        ),
        (
            "initial_version only counts without a version",
            json!({"start": "9 AM", "stop": "10 AM", "initial_version": true}),
            Some("2024-06-03T09:00:00Z"),
            "2024-06-03T20:00:00Z",
            &["2024-06-03T09:00:00Z"],
        ),
        // start_after.
        (
            "before start_after",
            json!({"start_after": "2024-06-05T09:00", "location": "Europe/Paris"}),
            None,
            "2024-06-05T06:59:00Z",
            &[],
        ),
        (
            "at start_after",
            json!({"start_after": "2024-06-05T09:00", "location": "Europe/Paris"}),
            None,
            "2024-06-05T07:00:00Z",
            &[],
        ),
        (
            "after start_after",
            json!({"start_after": "2024-06-05 09:00:00", "location": "Europe/Paris"}),
            None,
            "2024-06-05T07:00:01Z",
            &["2024-06-05T09:00:01+02:00"],
        ),
    ];
    for (what, source, previous, now, expected) in cases {
        let settings = settings(source.clone());
        let previous = previous.map(|text| (text, at(text)));
        let got =
            check_versions(&settings, previous, at(now)).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(
            got, *expected,
            "{what}: {source} after {previous:?} at {now}"
        );
    }
}

#[test]
fn sources_are_refused_naming_the_field() {
    let cases: &[(Value, &str)] = &[
        (
            json!({"interval": "0"}),
            "source.interval: \"0\" is 0: it must be more than 0",
        ),
        (
            json!({"interval": "0s"}),
            "source.interval: \"0s\" is 0: it must be more than 0",
        ),
        (
            json!({"interval": "-1m"}),
            "source.interval: \"-1m\" is negative: it must be more than 0",
        ),
        (
            json!({"interval": "5"}),
            "source.interval: \"5\" has a number without a unit (ns, us, ms, s, m or h)",
        ),
        (
            json!({"interval": "5 minutes"}),
            "source.interval: \"5 minutes\" has an unknown unit \" minutes\" (ns, us, ms, s, m or h)",
        ),
        (
            json!({"interval": "h"}),
            "source.interval: \"h\" is not a duration (numbers with units ns, us, ms, s, m or h: 90s, 1h30m, 1.5h)",
        ),
        (
            json!({"interval": ""}),
            "source.interval: \"\" is not a duration (numbers with units ns, us, ms, s, m or h: 90s, 1h30m, 1.5h)",
        ),
        (
            json!({"interval": "2562048h"}),
            "source.interval: \"2562048h\" is longer than the longest interval, 2562047h47m16.854775807s",
        ),
        (
            json!({"interval": "2562047h47m16.854775808s"}),
            "source.interval: \"2562047h47m16.854775808s\" is longer than the longest interval, 2562047h47m16.854775807s",
        ),
        (
            json!({"interval": "99999999999999999999999999h"}),
            "source.interval: \"99999999999999999999999999h\" is longer than the longest interval, 2562047h47m16.854775807s",
        ),
        (
            json!({"location": "Mars/Olympus_Mons"}),
            "source.location: \"Mars/Olympus_Mons\" is not a time zone of the tz database (such as UTC, Europe/Paris, America/New_York)",
        ),
        (
            json!({"location": "../../etc/passwd"}),
            "source.location: \"../../etc/passwd\" is not a time zone of the tz database (such as UTC, Europe/Paris, America/New_York)",
        ),
        (
            json!({"start": "9 AM"}),
            "source.start: needs source.stop too (the end of the window)",
        ),
        (
            json!({"stop": "9 AM"}),
            "source.stop: needs source.start too (the start of the window)",
        ),
        (
            json!({"start": "25:00", "stop": "9 AM"}),
            "source.start: \"25:00\" is not a time of day (3:04 PM, 3PM, 3 PM, 15:04 or 1504, optionally followed by an offset such as -0700)",
        ),
        (
            json!({"start": "9 AM", "stop": "9:60"}),
            "source.stop: \"9:60\" is not a time of day (3:04 PM, 3PM, 3 PM, 15:04 or 1504, optionally followed by an offset such as -0700)",
        ),
        (
            json!({"start": "13 PM", "stop": "9 AM"}),
            "source.start: \"13 PM\" is not a time of day (3:04 PM, 3PM, 3 PM, 15:04 or 1504, optionally followed by an offset such as -0700)",
        ),
        (
            json!({"start": "3:04PM", "stop": "9 AM"}),
            "source.start: \"3:04PM\" is not a time of day (3:04 PM, 3PM, 3 PM, 15:04 or 1504, optionally followed by an offset such as -0700)",
        ),
        (
            json!({"start": "9 am", "stop": "noon"}),
            "source.start: \"9 am\" is not a time of day (3:04 PM, 3PM, 3 PM, 15:04 or 1504, optionally followed by an offset such as -0700)",
        ),
        (
            json!({"start": "9 AM +2", "stop": "10 AM"}),
            "source.start: \"9 AM +2\" is not a time of day (3:04 PM, 3PM, 3 PM, 15:04 or 1504, optionally followed by an offset such as -0700)",
        ),
        (
            json!({"days": ["Monday", "Funday"]}),
            "source.days[1]: \"Funday\" is not a day (Sunday, Monday, Tuesday, Wednesday, Thursday, Friday or Saturday)",
        ),
        (
            json!({"start_after": "2024-02-30"}),
            "source.start_after: \"2024-02-30\" is not a date and time (2006-01-02T15:04:05, 2006-01-02 15:04:05, 2006-01-02T15:04, 2006-01-02T15 or 2006-01-02)",
        ),
        (
            json!({"start_after": "2024-06-05T9:00"}),
            "source.start_after: \"2024-06-05T9:00\" is not a date and time (2006-01-02T15:04:05, 2006-01-02 15:04:05, 2006-01-02T15:04, 2006-01-02T15 or 2006-01-02)",
        ),
    ];
    for (source, expected) in cases {
        let parsed: Source = serde_json::from_value(source.clone()).unwrap();
        assert_eq!(parsed.settings().unwrap_err(), *expected, "{source}");
    }
}

#[test]
fn concourses_formats_are_read() {
    for (text, minutes) in [
        ("8:00 PM", 20 * 60),
        ("08:00 PM", 20 * 60),
        ("8PM", 20 * 60),
        ("8 PM", 20 * 60),
        ("12 AM", 0),
        ("12:30 AM", 30),
        ("12 PM", 12 * 60),
        ("0:15 AM", 15),
        ("20:00", 20 * 60),
        ("7:05", 7 * 60 + 5),
        ("2000", 20 * 60),
        ("0000", 0),
        ("23:59", 23 * 60 + 59),
        ("3PM -0700", 22 * 60),
        ("1:00 +0200", 23 * 60),
        ("3:04 PM +0000", 15 * 60 + 4),
    ] {
        assert_eq!(parse_time_of_day(text), Ok(minutes), "{text}");
    }
    for (text, nanos) in [
        ("90s", 90_000_000_000u64),
        ("1h30m", 5_400_000_000_000),
        ("1.5h", 5_400_000_000_000),
        (".5s", 500_000_000),
        ("+1m", 60_000_000_000),
        ("1µs", 1_000),
        ("1μs", 1_000),
        ("1us1ns", 1_001),
        ("2562047h47m16.854775807s", i64::MAX as u64),
        ("0.000000000001s1ns", 1),
    ] {
        assert_eq!(parse_interval(text), Ok(nanos), "{text}");
    }
    let s = settings(json!({"location": "", "days": []}));
    assert_eq!(s.zone, TimeZone::UTC);
    assert_eq!(s.days, 0);
    assert_eq!(settings(json!({"location": "Local"})).zone, TimeZone::UTC);
    assert_eq!(
        settings(json!({"start_after": "2024-06-05T09"})).start_after,
        Some(jiff::civil::date(2024, 6, 5).at(9, 0, 0, 0))
    );
}

#[test]
fn version_times_are_rfc_3339() {
    let (ts, offset) = parse_version_time("2024-06-03T12:00:00.1234567891+05:30").unwrap();
    assert_eq!(offset.seconds(), 5 * 3600 + 1800);
    assert_eq!(ts, at("2024-06-03T06:30:00.123456789Z"));
    for bad in [
        "2024-06-03 12:00:00Z",
        "2024-06-03T12:00:00",
        "2024-06-03T12:00:00.Z",
        "2024-06-03T12:00:00z",
        "2024-06-03T24:00:00Z",
        "2024-02-30T00:00:00Z",
        "2024-06-03T12:00:00+5:30",
        "2024-06-03T12:00:00+24:00",
        "2024-06-03T12:00:00Z ",
        "2024-06-03T12:00:00\u{e9}",
        "yesterday",
    ] {
        assert!(parse_version_time(bad).is_err(), "{bad}");
    }
    // Go's RFC3339Nano: no trailing zeros, Z for UTC, the zone's offset.
    let paris = jiff::tz::db().get("Europe/Paris").unwrap();
    for (moment, zone, text) in [
        (
            "2024-06-03T12:00:00Z",
            &TimeZone::UTC,
            "2024-06-03T12:00:00Z",
        ),
        (
            "2024-06-03T12:00:00.5Z",
            &TimeZone::UTC,
            "2024-06-03T12:00:00.5Z",
        ),
        (
            "2024-06-03T12:00:00.000000010Z",
            &TimeZone::UTC,
            "2024-06-03T12:00:00.00000001Z",
        ),
        ("2024-06-03T12:00:00Z", &paris, "2024-06-03T14:00:00+02:00"),
        ("2024-01-03T12:00:00Z", &paris, "2024-01-03T13:00:00+01:00"),
    ] {
        assert_eq!(format_version(at(moment), zone), text);
    }
    // Before offsets were whole minutes: written in UTC.
    assert_eq!(
        format_version(at("1850-01-01T12:00:00Z"), &paris),
        "1850-01-01T12:00:00Z"
    );
}

#[test]
fn the_timestamp_file_is_as_go_prints_it() {
    for (version, text) in [
        ("2024-06-03T12:00:00Z", "2024-06-03 12:00:00 +0000 UTC"),
        ("2024-06-03T12:00:00+00:00", "2024-06-03 12:00:00 +0000 UTC"),
        (
            "2024-06-03T12:00:00.5+05:30",
            "2024-06-03 12:00:00.5 +0530 +0530",
        ),
        (
            "2024-06-03T08:00:00.120-04:00",
            "2024-06-03 08:00:00.12 -0400 -0400",
        ),
    ] {
        let (ts, offset) = parse_version_time(version).unwrap();
        assert_eq!(format_timestamp_file(ts, offset), text, "{version}");
    }
}

/// Runs an action of the type and returns (exit code, stdout, stderr).
fn call(action: &str, args: &[&str], stdin: &str) -> (i32, String, String) {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = crate::run("time", action, &args, stdin.as_bytes(), &mut out, &mut err);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

#[test]
fn check_in_and_out_speak_the_protocol() {
    // check: no version yet, so the current time.
    let (code, out, err) = call(
        "check",
        &[],
        r#"{"source":{"interval":"1h"},"version":null}"#,
    );
    assert_eq!(code, 0, "{err}");
    let answer: Value = serde_json::from_str(&out).unwrap();
    let versions = answer.as_array().unwrap();
    assert_eq!(versions.len(), 1, "{out}");
    let now = versions[0]["time"].as_str().unwrap();
    let (checked, _) = parse_version_time(now).unwrap();
    let age = Timestamp::now().as_nanosecond() - checked.as_nanosecond();
    assert!((0..60_000_000_000).contains(&age), "{now}");
    // ... and the given version alone an hour later.
    let request = json!({"source": {"interval": "1h"}, "version": {"time": now}});
    let (code, out, err) = call("check", &[], &request.to_string());
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap(),
        json!([{"time": now}])
    );

    // in writes input, timestamp and epoch, and answers the version as given.
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("t");
    let request = json!({
        "source": {"interval": "1h", "location": "Asia/Kolkata", "days": null},
        "version": {"time": "2024-06-03T12:00:00.000+05:30"},
        "params": {},
    });
    let (code, out, err) = call("in", &[dest.to_str().unwrap()], &request.to_string());
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap(),
        json!({"version": {"time": "2024-06-03T12:00:00.000+05:30"}, "metadata": []})
    );
    let read = |name: &str| std::fs::read_to_string(dest.join(name)).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&read("input")).unwrap(),
        json!({"source": {"interval": "1h", "location": "Asia/Kolkata"},
               "version": {"time": "2024-06-03T12:00:00.000+05:30"}})
    );
    assert_eq!(read("timestamp"), "2024-06-03 12:00:00 +0530 +0530");
    assert_eq!(read("epoch"), "1717396200");
    // Epoch seconds are floored, as Go's Unix() is.
    let request = json!({"source": {}, "version": {"time": "1969-12-31T23:59:59.5Z"}});
    let (code, _, err) = call("in", &[dest.to_str().unwrap()], &request.to_string());
    assert_eq!(code, 0, "{err}");
    assert_eq!(read("epoch"), "-1");

    // out: the current time, in the location's offset.
    let request = json!({"source": {"location": "Asia/Kolkata"}, "params": {}});
    let (code, out, err) = call("out", &[dir.path().to_str().unwrap()], &request.to_string());
    assert_eq!(code, 0, "{err}");
    let answer: Value = serde_json::from_str(&out).unwrap();
    let time = answer["version"]["time"].as_str().unwrap();
    assert!(time.ends_with("+05:30"), "{time}");
    assert_eq!(answer["metadata"], json!([]));
}

#[test]
fn bad_requests_are_refused_naming_the_field() {
    let cases: &[(&str, &[&str], &str, &str)] = &[
        (
            "check",
            &[],
            r#"{"source":{"intervall":"1m"}}"#,
            "error: invalid request: source: unknown field `intervall`, expected one of `interval`, `location`, `start`, `stop`, `days`, `initial_version`, `start_after` at line 1 column 22\n",
        ),
        (
            "check",
            &[],
            r#"{"source":{"start":1504,"stop":"1600"}}"#,
            "error: invalid request: source.start: invalid type: integer `1504`, expected a string at line 1 column 23\n",
        ),
        (
            "check",
            &[],
            r#"{"source":{"initial_version":"yes"}}"#,
            "error: invalid request: source.initial_version: invalid type: string \"yes\", expected a boolean at line 1 column 34\n",
        ),
        (
            "check",
            &[],
            r#"{"source":{"interval":"0m"}}"#,
            "error: source.interval: \"0m\" is 0: it must be more than 0\n",
        ),
        (
            "check",
            &[],
            r#"{"source":{},"version":{"time":"now"}}"#,
            "error: version.time: \"now\" is not a time (RFC 3339, such as 2024-06-01T20:05:03Z or 2024-06-01T20:05:03.5+02:00)\n",
        ),
        (
            "check",
            &[],
            r#"{"source":{},"version":{"time":"2024-06-03T12:00:00Z","ref":"x"}}"#,
            "error: invalid request: version: unknown field `ref`, expected `time` at line 1 column 59\n",
        ),
        (
            "in",
            &["/nonexistent/never"],
            r#"{"source":{},"version":{"time":"2024-06-03T12:00:00Z"},"params":{"format":"x"}}"#,
            "error: invalid request: params: unknown field `format`, there are no fields at line 1 column 73\n",
        ),
        (
            "out",
            &["/tmp"],
            r#"{"source":{"location":"Nowhere/Atlantis"}}"#,
            "error: source.location: \"Nowhere/Atlantis\" is not a time zone of the tz database (such as UTC, Europe/Paris, America/New_York)\n",
        ),
    ];
    for (action, args, stdin, expected) in cases {
        let (code, out, err) = call(action, args, stdin);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (1, "", *expected),
            "{stdin}"
        );
    }
}
