//! Build output with every resolved secret replaced by `((redacted))`, as
//! Concourse's build output filter does:
//!
//! - A multi-line value is redacted line by line, each line trimmed of
//!   surrounding spaces (a key file printed by a task leaks none of its
//!   lines, whatever the indentation).
//! - Values (or lines) shorter than two characters are not redacted: one
//!   character would replace every occurrence of a common letter or digit,
//!   making logs unreadable while hiding nothing a reader could not guess.
//! - Text arrives in chunks: [`Redactor`] holds back the end of a chunk that
//!   could be the start of a secret until the next one says, so a secret
//!   split between two writes is still redacted. It holds at most the
//!   longest secret's length minus one byte.
//! - Where secrets overlap, the one that starts first wins, and of those
//!   starting at one place the longest; a shorter match never goes out while
//!   a longer secret could still complete there.

/// What a secret is replaced by.
pub const REDACTED: &str = "((redacted))";

/// The secrets of one build, ready to be searched for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Secrets {
    /// Longest first, no duplicates, each at least two characters.
    needles: Vec<String>,
    /// Which bytes a needle can start with.
    first_bytes: [bool; 256],
}

impl Default for Secrets {
    fn default() -> Secrets {
        Secrets::new(Vec::<String>::new())
    }
}

impl Secrets {
    pub fn new<I, S>(values: I) -> Secrets
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut needles: Vec<String> = values
            .into_iter()
            .flat_map(|v| {
                v.as_ref()
                    .split('\n')
                    .map(|line| line.trim().to_string())
                    .collect::<Vec<_>>()
            })
            .filter(|line| line.chars().count() > 1)
            .collect();
        needles.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        needles.dedup();
        let mut first_bytes = [false; 256];
        for n in &needles {
            first_bytes[n.as_bytes()[0] as usize] = true;
        }
        Secrets {
            needles,
            first_bytes,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.needles.is_empty()
    }

    /// These secrets and `more` (a `load_var` adds its value to the
    /// build's secrets once it ran).
    pub fn extended<I, S>(&self, more: I) -> Secrets
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let more: Vec<String> = more.into_iter().map(|s| s.as_ref().to_string()).collect();
        Secrets::new(self.needles.iter().cloned().chain(more))
    }

    fn longest(&self) -> usize {
        self.needles.first().map_or(0, String::len)
    }

    /// `text` redacted whole (a line that is written at once).
    pub fn redact(&self, text: &str) -> String {
        if self.is_empty() {
            return text.to_string();
        }
        scan(self, text, true).0
    }
}

/// Every string and number `values` hold: what a build's output must not
/// show of them.
pub fn secret_texts<'a>(values: impl IntoIterator<Item = &'a serde_json::Value>) -> Vec<String> {
    use serde_json::Value;
    let mut out = Vec::new();
    let mut stack: Vec<&Value> = values.into_iter().collect();
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => out.push(s.clone()),
            Value::Number(n) => out.push(n.to_string()),
            Value::Array(items) => stack.extend(items),
            Value::Object(m) => stack.extend(m.values()),
            Value::Bool(_) | Value::Null => {}
        }
    }
    out
}

/// What one position of the text is.
enum At {
    /// A secret of this length starts here and no longer one could.
    Secret(usize),
    /// The text ends inside what could still become a secret.
    MaybeSecret,
    Plain,
}

/// Redacts a stream of text given in chunks.
#[derive(Debug, Clone)]
pub struct Redactor {
    secrets: Secrets,
    /// Input not yet decided on: could begin a secret.
    held: String,
}

impl Redactor {
    pub fn new(secrets: Secrets) -> Redactor {
        Redactor {
            secrets,
            held: String::new(),
        }
    }

    /// How many bytes of the input given so far are held back (not yet in
    /// any output): a caller that records how far it has written counts
    /// them as not written.
    pub fn held_len(&self) -> usize {
        self.held.len()
    }

    /// Forgets what is held (the caller reads the stream again from where
    /// its output stopped).
    pub fn reset(&mut self) {
        self.held.clear();
    }

    /// The output for `chunk`: all that can be decided, secrets replaced.
    pub fn push(&mut self, chunk: &str) -> String {
        if self.secrets.is_empty() {
            return chunk.to_string();
        }
        let mut text = std::mem::take(&mut self.held);
        text.push_str(chunk);
        let (out, rest) = scan(&self.secrets, &text, false);
        self.held = text[rest..].to_string();
        debug_assert!(self.held.len() < self.secrets.longest().max(1));
        out
    }

    /// The output for what is held at the end of the stream.
    pub fn finish(&mut self) -> String {
        let text = std::mem::take(&mut self.held);
        scan(&self.secrets, &text, true).0
    }
}

/// Redacts `text`; returns the output and where undecided input starts.
fn scan(secrets: &Secrets, text: &str, at_end: bool) -> (String, usize) {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut plain_from = 0;
    let mut i = 0;
    while i < bytes.len() {
        match at(secrets, &text[i..], at_end) {
            At::Secret(len) => {
                out.push_str(&text[plain_from..i]);
                out.push_str(REDACTED);
                i += len;
                plain_from = i;
            }
            At::MaybeSecret => {
                out.push_str(&text[plain_from..i]);
                return (out, i);
            }
            At::Plain => {
                // Needles are whole strings, so a match starts on a char
                // boundary: step over the whole char.
                i += text[i..].chars().next().map_or(1, char::len_utf8);
            }
        }
    }
    out.push_str(&text[plain_from..]);
    (out, text.len())
}

fn at(secrets: &Secrets, rest: &str, at_end: bool) -> At {
    if !secrets.first_bytes[rest.as_bytes()[0] as usize] {
        return At::Plain;
    }
    let mut found = None;
    // Longest first: the first complete match is the longest, but a
    // longer needle cut off by the end of the text must be waited for.
    for n in &secrets.needles {
        if rest.starts_with(n.as_str()) {
            found = Some(n.len());
            break;
        }
        if !at_end && rest.len() < n.len() && n.starts_with(rest) {
            return At::MaybeSecret;
        }
    }
    match found {
        Some(len) => At::Secret(len),
        None => At::Plain,
    }
}

#[cfg(test)]
mod tests;
