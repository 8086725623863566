//! Job name patterns, as `passed` and groups' `jobs` take them: `*` (any
//! run of characters), `?` (one character), `[…]` classes with ranges and
//! `^` or `!` negation, and `\` escaping the next character. Groups also
//! take `{a,b}` alternatives (Concourse matches them with gobwas/glob);
//! `passed` does not (Go's `path.Match`), where braces are plain
//! characters.

/// The most alternatives one pattern's braces may expand to.
pub(crate) const MAX_ALTERNATIVES: usize = 32;

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

/// A pattern: any of its alternatives matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Glob(Vec<Vec<Token>>);

/// The pattern with its first top-level `{…}` group expanded, recursively.
fn expand(text: &str, out: &mut Vec<String>) -> Result<(), String> {
    let chars: Vec<char> = text.chars().collect();
    let mut depth = 0;
    let mut open = None;
    let mut commas = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 1,
            '{' => {
                if depth == 0 {
                    open = Some(i);
                    commas.clear();
                }
                depth += 1;
            }
            ',' if depth == 1 => commas.push(i),
            '}' if depth == 0 => return Err("an unopened '}'".into()),
            '}' => {
                depth -= 1;
                if depth == 0 {
                    let start = open.unwrap_or(0);
                    let head: String = chars[..start].iter().collect();
                    let tail: String = chars[i + 1..].iter().collect();
                    let mut bounds = vec![start];
                    bounds.extend(&commas);
                    bounds.push(i);
                    for w in bounds.windows(2) {
                        let alt: String = chars[w[0] + 1..w[1]].iter().collect();
                        expand(&format!("{head}{alt}{tail}"), out)?;
                        if out.len() > MAX_ALTERNATIVES {
                            return Err(format!(
                                "its '{{…}}' alternatives expand to more than {MAX_ALTERNATIVES} patterns"
                            ));
                        }
                    }
                    return Ok(());
                }
            }
            _ => {}
        }
        i += 1;
    }
    if depth > 0 {
        return Err("an unclosed '{'".into());
    }
    out.push(text.to_string());
    Ok(())
}

impl Glob {
    /// A pattern of `passed`: braces are plain characters.
    pub(crate) fn compile(text: &str) -> Result<Glob, String> {
        Ok(Glob(vec![tokens(text)?]))
    }

    /// A pattern of a group's `jobs`, with `{a,b}` alternatives.
    pub(crate) fn compile_with_braces(text: &str) -> Result<Glob, String> {
        let mut alternatives = Vec::new();
        expand(text, &mut alternatives)?;
        Ok(Glob(
            alternatives
                .iter()
                .map(|a| tokens(a))
                .collect::<Result<_, _>>()?,
        ))
    }

    pub(crate) fn matches(&self, name: &str) -> bool {
        let name: Vec<char> = name.chars().collect();
        self.0.iter().any(|t| matches_tokens(t, &name))
    }
}

fn tokens(text: &str) -> Result<Vec<Token>, String> {
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
    Ok(tokens)
}

/// Whether the tokens match the whole name. Backtracks only to the last
/// `*`, so it is linear in the name times the pattern.
fn matches_tokens(tokens: &[Token], name: &[char]) -> bool {
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
