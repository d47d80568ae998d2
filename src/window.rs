//! Sync windows: when automatic applies and drift reverts may run, as Argo CD's sync windows.
//!
//! A window opens at each time its 5-field cron schedule matches, in its time zone, and stays
//! open for its duration. Inside any active `deny` window, or outside every `allow` window
//! (when there are any), automatic syncs are held: no new revision is applied and no drift is
//! reverted; drift is still detected and reported. A held app may still be synced by hand when
//! every window holding it has `manualSync: true`. Schedules are evaluated by croner on the
//! window's local time (chrono-tz), so a window that opens at 02:30 on a day that skips 02:30
//! follows croner's DST rules, and durations are absolute time.
//!
//! Pure: the caller passes the time.

use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::status::Reason;

/// Whether a sync window lets syncs run or holds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WindowKind {
    /// Automatic syncs run only inside allow windows (when there are any).
    Allow,
    /// No automatic sync runs inside a deny window.
    Deny,
}

/// `apps[].sync.windows[]`, as Argo CD's sync windows.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WindowConfig {
    /// `allow` or `deny`.
    pub kind: WindowKind,
    /// When the window opens: a 5-field cron expression (minute hour day-of-month month
    /// day-of-week; Sunday is 0 or 7), evaluated by croner.
    pub schedule: Spanned<String>,
    /// How long it stays open after each opening.
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub duration: Spanned<Duration>,
    /// IANA time zone of the schedule, e.g. `Europe/Berlin`. Default `UTC`.
    #[serde(default)]
    pub time_zone: Option<Spanned<String>>,
    /// Manual syncs (`POST /api/v1/apps/{name}/sync`) may run while this window holds the app.
    /// Default false.
    #[serde(default)]
    pub manual_sync: bool,
}

/// A window, parsed.
#[derive(Clone, Debug)]
pub struct Window {
    kind: WindowKind,
    cron: Cron,
    schedule: String,
    duration: Duration,
    tz: Tz,
    manual_sync: bool,
}

/// Errors from reading a window (the config validates these first).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cron expression does not parse.
    #[error("invalid schedule `{schedule}`")]
    Schedule {
        /// The expression.
        schedule: String,
        /// croner's error.
        #[source]
        source: croner::errors::CronError,
    },
    /// The time zone is unknown.
    #[error("unknown time zone `{0}`")]
    TimeZone(String),
}

impl Window {
    /// Parses a configured window.
    ///
    /// # Errors
    ///
    /// [`Error::Schedule`], [`Error::TimeZone`].
    pub fn new(cfg: &WindowConfig) -> Result<Self, Error> {
        let schedule = cfg.schedule.value.trim().to_string();
        let cron = schedule.parse::<Cron>().map_err(|source| Error::Schedule {
            schedule: schedule.clone(),
            source,
        })?;
        let tz = match &cfg.time_zone {
            Some(t) => t
                .value
                .parse::<Tz>()
                .map_err(|_| Error::TimeZone(t.value.clone()))?,
            None => Tz::UTC,
        };
        Ok(Self {
            kind: cfg.kind,
            cron,
            schedule,
            duration: cfg.duration.value,
            tz,
            manual_sync: cfg.manual_sync,
        })
    }

    /// When this window, open at `now`, closes; `None` when it is not open.
    fn open_until(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.open_until_chained(now).map(|(end, _)| end)
    }

    /// When this window, open at `now`, closes, with occurrences that start before the one
    /// in force ends chained together (`* * * * *` for 1h is open until the schedule stops
    /// repeating, not for one hour); `true` with it when the chain was cut after
    /// [`MAX_CHAINED`] occurrences (the end is then a lower bound). `None` when not open.
    fn open_until_chained(&self, now: DateTime<Utc>) -> Option<(DateTime<Utc>, bool)> {
        let local = now.with_timezone(&self.tz);
        let duration = chrono::Duration::from_std(self.duration).ok()?;
        let start = self.cron.find_previous_occurrence(&local, true).ok()?;
        let mut end = start.with_timezone(&Utc) + duration;
        if now >= end {
            return None;
        }
        let mut from = start;
        for _ in 0..MAX_CHAINED {
            let Ok(next) = self.cron.find_next_occurrence(&from, false) else {
                return Some((end, false));
            };
            if next.with_timezone(&Utc) > end {
                return Some((end, false));
            }
            end = end.max(next.with_timezone(&Utc) + duration);
            from = next;
        }
        Some((end, true))
    }

    /// The next time after `now` this window opens.
    fn next_open(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = now.with_timezone(&self.tz);
        self.cron
            .find_next_occurrence(&local, false)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }

    fn describe(&self) -> String {
        let kind = match self.kind {
            WindowKind::Allow => "allow",
            WindowKind::Deny => "deny",
        };
        format!(
            "{kind} window `{}` for {} ({})",
            self.schedule,
            humantime::format_duration(self.duration),
            self.tz
        )
    }
}

/// How many overlapping occurrences of one window are chained to find when it closes; past
/// it the end is given as a lower bound ("until at least").
pub const MAX_CHAINED: usize = 100;

/// Whether syncs may run at one moment, and why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    /// Automatic applies and drift reverts may run.
    pub automatic: bool,
    /// A manual sync may run.
    pub manual: bool,
    /// Why syncs are held (`DenyWindowActive`, `OutsideAllowWindows`), or `None`.
    pub reason: Option<Reason>,
    /// Which window holds the app and until when, for people.
    pub message: String,
    /// When automatic syncs may run again (`None` when they may now, or never will).
    pub next_open: Option<DateTime<Utc>>,
}

/// The state of a set of windows at `now`. No windows: always open.
pub fn state(windows: &[Window], now: DateTime<Utc>) -> State {
    let mut s = hold(windows, now);
    if !s.automatic {
        s.next_open = next_open(windows, now);
        if let Some(t) = s.next_open {
            s.message.push_str(&format!(
                "; syncs resume at {}",
                t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ));
        }
    }
    s
}

fn hold(windows: &[Window], now: DateTime<Utc>) -> State {
    let denying: Vec<(&Window, (DateTime<Utc>, bool))> = windows
        .iter()
        .filter(|w| w.kind == WindowKind::Deny)
        .filter_map(|w| w.open_until_chained(now).map(|end| (w, end)))
        .collect();
    if let Some((w, (end, cut))) = denying.first() {
        return State {
            automatic: false,
            manual: denying.iter().all(|(w, _)| w.manual_sync),
            reason: Some(Reason::DenyWindowActive),
            message: format!(
                "held by the {} until {}{}",
                w.describe(),
                if *cut { "at least " } else { "" },
                end.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
            next_open: None,
        };
    }
    let allows: Vec<&Window> = windows
        .iter()
        .filter(|w| w.kind == WindowKind::Allow)
        .collect();
    if !allows.is_empty() && !allows.iter().any(|w| w.open_until(now).is_some()) {
        return State {
            automatic: false,
            manual: allows.iter().any(|w| w.manual_sync),
            reason: Some(Reason::OutsideAllowWindows),
            message: format!(
                "outside every allow window ({})",
                allows
                    .iter()
                    .map(|w| w.describe())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            next_open: None,
        };
    }
    State {
        automatic: true,
        manual: true,
        reason: None,
        message: if windows.is_empty() {
            "no sync windows".into()
        } else {
            "inside the sync windows".into()
        },
        next_open: None,
    }
}

/// The first time after `now` when automatic syncs may run: walks window boundaries (deny
/// windows closing, allow windows opening) until one is open. `None` when none within 400
/// boundaries.
fn next_open(windows: &[Window], now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let mut t = now;
    for _ in 0..400 {
        if hold(windows, t).automatic {
            return Some(t);
        }
        // The nearest boundary after t: an open window closing, or a window opening.
        let mut boundaries = Vec::with_capacity(windows.len());
        for w in windows {
            match w.open_until_chained(t) {
                // A window whose end is not known: neither is when syncs resume.
                Some((_, true)) => return None,
                Some((end, false)) => boundaries.push(end),
                None => boundaries.extend(w.next_open(t)),
            }
        }
        t = boundaries.into_iter().filter(|b| *b > t).min()?;
    }
    None
}

/// The next time the state may change after `now` (a window opening or closing), to
/// re-evaluate then.
pub fn next_change(windows: &[Window], now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    windows
        .iter()
        .filter_map(|w| match w.open_until(now) {
            Some(end) => Some(end),
            None => w.next_open(now),
        })
        .filter(|b| *b > now)
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_saphyr::{Location, Spanned};

    fn w(
        kind: WindowKind,
        schedule: &str,
        duration: &str,
        tz: Option<&str>,
        manual: bool,
    ) -> Window {
        let sp = |s: &str| Spanned::new(s.to_string(), Location::UNKNOWN, Location::UNKNOWN);
        Window::new(&WindowConfig {
            kind,
            schedule: sp(schedule),
            duration: Spanned::new(
                humantime::parse_duration(duration).unwrap(),
                Location::UNKNOWN,
                Location::UNKNOWN,
            ),
            time_zone: tz.map(sp),
            manual_sync: manual,
        })
        .unwrap()
    }

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
    }

    #[test]
    fn no_windows_is_always_open() {
        assert!(state(&[], utc(2026, 1, 1, 0, 0)).automatic);
    }

    #[test]
    fn deny_windows_hold_and_say_until_when() {
        let deny = [w(WindowKind::Deny, "0 22 * * *", "8h", None, false)];
        let at = |h, m| state(&deny, utc(2026, 6, 10, h, m));
        assert!(at(21, 59).automatic);
        let held = at(23, 0);
        assert!(!held.automatic && !held.manual);
        assert_eq!(held.reason, Some(Reason::DenyWindowActive));
        assert!(
            held.message.contains("until 2026-06-11T06:00:00Z"),
            "{}",
            held.message
        );
        assert_eq!(held.next_open, Some(utc(2026, 6, 11, 6, 0)));
        assert!(
            state(&deny, utc(2026, 6, 11, 5, 59)).reason.is_some(),
            "across midnight"
        );
        assert!(state(&deny, utc(2026, 6, 11, 6, 0)).automatic);
    }

    #[test]
    fn overlapping_occurrences_are_one_window_until_the_schedule_stops() {
        // Every 30 minutes from 9:00 to 11:30, each open 1h: one window from 9:00 to 12:30.
        let chained = [w(WindowKind::Deny, "*/30 9-11 * * *", "1h", None, false)];
        let held = state(&chained, utc(2026, 6, 10, 9, 5));
        assert!(
            held.message.contains("until 2026-06-10T12:30:00Z"),
            "{}",
            held.message
        );
        assert_eq!(held.next_open, Some(utc(2026, 6, 10, 12, 30)));
        // Every minute for an hour: never closes; the message says it looked a day ahead.
        let always = [w(WindowKind::Deny, "* * * * *", "1h", None, false)];
        let held = state(&always, utc(2026, 6, 10, 9, 5));
        assert!(
            held.message.contains("until at least 2026-06-10T11:"),
            "{}",
            held.message
        );
        assert_eq!(held.next_open, None);
    }

    #[test]
    fn allow_windows_hold_outside_them_and_manual_sync_follows_the_holders() {
        let allow = [w(WindowKind::Allow, "0 9 * * 1-5", "8h", None, true)];
        // Monday 2026-06-08.
        assert!(state(&allow, utc(2026, 6, 8, 10, 0)).automatic);
        let evening = state(&allow, utc(2026, 6, 8, 18, 0));
        assert_eq!(evening.reason, Some(Reason::OutsideAllowWindows));
        assert!(evening.manual);
        assert_eq!(evening.next_open, Some(utc(2026, 6, 9, 9, 0)));
        // Friday evening: next opening is Monday.
        let friday = state(&allow, utc(2026, 6, 12, 20, 0));
        assert_eq!(friday.next_open, Some(utc(2026, 6, 15, 9, 0)));
        // A deny window inside an allow window wins; manual sync needs every holder to allow it.
        let both = [
            w(WindowKind::Allow, "0 9 * * *", "8h", None, true),
            w(WindowKind::Deny, "0 12 * * *", "1h", None, false),
        ];
        let lunch = state(&both, utc(2026, 6, 8, 12, 30));
        assert_eq!(lunch.reason, Some(Reason::DenyWindowActive));
        assert!(!lunch.manual);
        assert_eq!(lunch.next_open, Some(utc(2026, 6, 8, 13, 0)));
    }

    #[test]
    fn windows_follow_their_time_zone() {
        // 09:00 in Berlin is 07:00 UTC in summer; in Kolkata (UTC+5:30) it is 03:30 UTC.
        let berlin = [w(
            WindowKind::Allow,
            "0 9 * * *",
            "1h",
            Some("Europe/Berlin"),
            false,
        )];
        assert!(state(&berlin, utc(2026, 7, 1, 7, 30)).automatic);
        assert!(!state(&berlin, utc(2026, 7, 1, 9, 30)).automatic);
        let kolkata = [w(
            WindowKind::Allow,
            "0 9 * * *",
            "1h",
            Some("Asia/Kolkata"),
            false,
        )];
        assert!(state(&kolkata, utc(2026, 7, 1, 3, 45)).automatic);
        assert!(!state(&kolkata, utc(2026, 7, 1, 4, 45)).automatic);
        let ny = [w(
            WindowKind::Deny,
            "0 0 * * *",
            "2h",
            Some("America/New_York"),
            false,
        )];
        assert!(!state(&ny, utc(2026, 7, 1, 4, 30)).automatic, "00:30 EDT");
        assert!(state(&ny, utc(2026, 7, 1, 6, 30)).automatic, "02:30 EDT");
    }

    #[test]
    fn windows_across_daylight_saving_changes() {
        // Berlin switches to summer time on 2026-03-29 at 02:00 (clocks jump to 03:00) and back
        // on 2026-10-25 at 03:00 (to 02:00).
        let nightly = [w(
            WindowKind::Deny,
            "0 1 * * *",
            "3h",
            Some("Europe/Berlin"),
            false,
        )];
        // Spring: opens 01:00 CET = 00:00 UTC, closes 3 hours later = 03:00 UTC (05:00 CEST).
        assert!(!state(&nightly, utc(2026, 3, 29, 2, 59)).automatic);
        let s = state(&nightly, utc(2026, 3, 29, 1, 0));
        assert_eq!(s.next_open, Some(utc(2026, 3, 29, 3, 0)));
        // The day after, 01:00 CEST = 23:00 UTC the day before.
        assert!(!state(&nightly, utc(2026, 3, 29, 23, 30)).automatic);
        assert!(state(&nightly, utc(2026, 3, 29, 22, 30)).automatic);
        // Autumn: 01:00 CEST = 23:00 UTC on the 24th; three hours of absolute time later.
        let autumn = state(&nightly, utc(2026, 10, 24, 23, 30));
        assert_eq!(autumn.next_open, Some(utc(2026, 10, 25, 2, 0)));
        // A window at 02:30 on the day 02:30 does not exist still opens once that day.
        let skipped = [w(
            WindowKind::Allow,
            "30 2 * * *",
            "1h",
            Some("Europe/Berlin"),
            false,
        )];
        let next = state(&skipped, utc(2026, 3, 28, 12, 0)).next_open.unwrap();
        assert!(
            next >= utc(2026, 3, 29, 0, 0) && next <= utc(2026, 3, 29, 2, 0),
            "{next}"
        );
    }

    #[test]
    fn the_next_change_is_the_nearest_boundary() {
        let deny = [w(WindowKind::Deny, "0 22 * * *", "8h", None, false)];
        assert_eq!(
            next_change(&deny, utc(2026, 6, 10, 12, 0)),
            Some(utc(2026, 6, 10, 22, 0))
        );
        assert_eq!(
            next_change(&deny, utc(2026, 6, 10, 23, 0)),
            Some(utc(2026, 6, 11, 6, 0))
        );
    }
}
