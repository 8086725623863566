//! Job name patterns, as `passed` and groups' `jobs` take them: `*` (any
//! run of characters), `?` (one character), `[…]` classes with ranges and
//! `^` or `!` negation, and `\` escaping the next character.

/// A pattern that holds none of the special characters names one job.
pub(crate) fn is_pattern(text: &str) -> bool {
    text.contains(['*', '?', '[', '\\', '{'])
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Char(char),
    Any,
    AnyRun,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Glob(Vec<Token>);

impl Glob {
    pub(crate) fn compile(text: &str) -> Result<Glob, String> {
        let mut tokens = Vec::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '*' => {
                    if tokens.last() != Some(&Token::AnyRun) {
                        tokens.push(Token::AnyRun);
                    }
                }
                '?' => tokens.push(Token::Any),
                '\\' => match chars.next() {
                    Some(e) => tokens.push(Token::Char(e)),
                    None => return Err("ends with an unescaped '\\'".into()),
                },
                '{' | '}' => {
                    return Err(
                        "'{…}' alternatives are not supported by hangar; list each pattern".into(),
                    )
                }
                '[' => {
                    let negated = matches!(chars.peek(), Some('^' | '!'));
                    if negated {
                        chars.next();
                    }
                    let mut ranges = Vec::new();
                    let mut closed = false;
                    while let Some(c) = chars.next() {
                        if c == ']' && !ranges.is_empty() {
                            closed = true;
                            break;
                        }
                        let lo = if c == '\\' {
                            chars.next().ok_or("an unclosed '['")?
                        } else {
                            c
                        };
                        let hi = if chars.peek() == Some(&'-') {
                            chars.next();
                            match chars.next() {
                                Some(']') | None => return Err("a range with no end".into()),
                                Some('\\') => chars.next().ok_or("an unclosed '['")?,
                                Some(h) => h,
                            }
                        } else {
                            lo
                        };
                        if hi < lo {
                            return Err(format!("the range {lo}-{hi} is backwards"));
                        }
                        ranges.push((lo, hi));
                    }
                    if !closed {
                        return Err("an unclosed '['".into());
                    }
                    tokens.push(Token::Class { negated, ranges });
                }
                c => tokens.push(Token::Char(c)),
            }
        }
        Ok(Glob(tokens))
    }

    /// Whether the pattern matches the whole name. Backtracks only to the
    /// last `*`, so it is linear in the name times the pattern.
    pub(crate) fn matches(&self, name: &str) -> bool {
        let name: Vec<char> = name.chars().collect();
        let tokens = &self.0;
        let (mut t, mut n) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while n < name.len() {
            let step = match tokens.get(t) {
                Some(Token::AnyRun) => {
                    star = Some((t, n));
                    t += 1;
                    continue;
                }
                Some(Token::Any) => true,
                Some(Token::Char(c)) => *c == name[n],
                Some(Token::Class { negated, ranges }) => {
                    let inside = ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&name[n]));
                    inside != *negated
                }
                None => false,
            };
            if step {
                t += 1;
                n += 1;
            } else if let Some((st, sn)) = star {
                t = st + 1;
                n = sn + 1;
                star = Some((st, sn + 1));
            } else {
                return false;
            }
        }
        tokens[t..].iter().all(|tok| *tok == Token::AnyRun)
    }
}
