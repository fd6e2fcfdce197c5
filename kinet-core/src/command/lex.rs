//! Splitting a command line into words and operators, as dash and bash
//! both read it; whatever the two read differently, or compute at run time,
//! is refused with the reason.

/// One character of a word and whether it was quoted or escaped (a quoted
/// `*` is a star, not a pattern).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Char {
    pub(crate) c: char,
    pub(crate) quoted: bool,
}

/// A word as written: its characters with their quoting, quotes removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Word {
    pub(crate) chars: Vec<Char>,
}

impl Word {
    /// The word's text, quotes removed.
    pub(crate) fn text(&self) -> String {
        self.chars.iter().map(|c| c.c).collect()
    }

    /// Whether every character is unquoted.
    pub(crate) fn unquoted(&self) -> bool {
        self.chars.iter().all(|c| !c.quoted)
    }

    /// `NAME=value` with `NAME` and `=` unquoted: an assignment when it
    /// comes before the program.
    pub(crate) fn assignment(&self) -> Option<(String, Word)> {
        let eq = self.chars.iter().position(|c| c.c == '=')?;
        let name = &self.chars[..eq];
        let valid = !name.is_empty()
            && !self.chars[eq].quoted
            && name
                .iter()
                .all(|c| !c.quoted && (c.c.is_ascii_alphanumeric() || c.c == '_'))
            && !name[0].c.is_ascii_digit();
        valid.then(|| {
            (
                name.iter().map(|c| c.c).collect(),
                Word {
                    chars: self.chars[eq + 1..].to_vec(),
                },
            )
        })
    }
}

/// A redirection operator with its descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RedirectOp {
    /// The descriptor written before it, if any.
    pub(crate) fd: Option<u8>,
    pub(crate) kind: OpKind,
}

/// What a redirection operator does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpKind {
    /// `<`
    Read,
    /// `>` and `>|`
    Write,
    /// `>>`
    Append,
    /// `>&` (the word is a descriptor)
    DupOut,
    /// `<&`
    DupIn,
}

/// A token of a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Token {
    Word(Word),
    /// `;`
    Semi,
    /// `&`
    Amp,
    /// `&&`
    And,
    /// `||`
    Or,
    /// `|`
    Pipe,
    Newline,
    Redirect(RedirectOp),
}

/// Reads `line` into tokens.
pub(crate) fn tokenize(line: &str) -> Result<Vec<Token>, String> {
    Lexer {
        chars: line.chars().collect(),
        at: 0,
        tokens: Vec::new(),
        word: Word::default(),
        in_word: false,
    }
    .run()
}

struct Lexer {
    chars: Vec<char>,
    at: usize,
    tokens: Vec<Token>,
    word: Word,
    /// A word is being built (an empty quoted word counts).
    in_word: bool,
}

impl Lexer {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.at + ahead).copied()
    }

    fn flush(&mut self) {
        if self.in_word {
            self.tokens
                .push(Token::Word(std::mem::take(&mut self.word)));
            self.in_word = false;
        }
    }

    fn push_char(&mut self, c: char, quoted: bool) {
        self.in_word = true;
        self.word.chars.push(Char { c, quoted });
    }

    fn operator(&mut self, token: Token, width: usize) {
        self.flush();
        self.tokens.push(token);
        self.at += width;
    }

    fn run(mut self) -> Result<Vec<Token>, String> {
        while let Some(c) = self.peek(0) {
            match c {
                ' ' | '\t' => {
                    self.flush();
                    self.at += 1;
                }
                '\n' => self.operator(Token::Newline, 1),
                ';' => {
                    if self.peek(1) == Some(';') {
                        return Err("`;;` belongs to a case statement".into());
                    }
                    self.operator(Token::Semi, 1);
                }
                '&' => match self.peek(1) {
                    Some('&') => self.operator(Token::And, 2),
                    Some('>') => {
                        return Err(
                            "`&>` sends both streams to a file in bash, but dash runs the command in the background and the rest as another command"
                                .into(),
                        );
                    }
                    _ => self.operator(Token::Amp, 1),
                },
                '|' => match self.peek(1) {
                    Some('|') => self.operator(Token::Or, 2),
                    Some('&') => return Err("`|&` is bash's alone".into()),
                    _ => self.operator(Token::Pipe, 1),
                },
                '<' | '>' => self.redirect(c)?,
                '(' | ')' => return Err("subshells and groups are not parsed".into()),
                '`' => {
                    return Err(
                        "command substitution (backquotes) computes words at run time".into(),
                    );
                }
                '$' => return Err(dollar(&self.chars, self.at)),
                '#' if !self.in_word => {
                    while self.peek(0).is_some_and(|c| c != '\n') {
                        self.at += 1;
                    }
                }
                '\\' => {
                    match self.peek(1) {
                        // A line continuation.
                        Some('\n') => {}
                        Some(next) => self.push_char(next, true),
                        None => return Err("a trailing backslash".into()),
                    }
                    self.at += 2;
                }
                '\'' => self.single_quoted()?,
                '"' => self.double_quoted()?,
                '\0' => return Err("a NUL character".into()),
                other => {
                    self.push_char(other, false);
                    self.at += 1;
                }
            }
        }
        self.flush();
        Ok(self.tokens)
    }

    /// A redirection operator; a word of unquoted digits right before it
    /// is its descriptor.
    fn redirect(&mut self, c: char) -> Result<(), String> {
        let mut fd = None;
        if self.in_word
            && self.word.unquoted()
            && self.word.chars.iter().all(|d| d.c.is_ascii_digit())
        {
            let digits = self.word.text();
            match digits.parse::<u8>() {
                Ok(n) if n <= 2 => fd = Some(n),
                _ => {
                    return Err(format!(
                        "a redirection of descriptor {digits} (kinet wires 0, 1 and 2 alone)"
                    ));
                }
            }
            self.word = Word::default();
            self.in_word = false;
        } else {
            self.flush();
        }
        let next = self.peek(1);
        let (kind, width) = match (c, next) {
            (_, Some('(')) => {
                return Err("process substitution computes a word at run time".into());
            }
            ('<', Some('<')) => return Err("here-documents are not parsed".into()),
            ('<', Some('>')) => {
                return Err("`<>` (open for reading and writing) is not parsed".into());
            }
            ('<', Some('&')) => (OpKind::DupIn, 2),
            ('<', _) => (OpKind::Read, 1),
            ('>', Some('>')) => (OpKind::Append, 2),
            ('>', Some('|')) => (OpKind::Write, 2),
            ('>', Some('&')) => (OpKind::DupOut, 2),
            _ => (OpKind::Write, 1),
        };
        self.tokens.push(Token::Redirect(RedirectOp { fd, kind }));
        self.at += width;
        Ok(())
    }

    fn single_quoted(&mut self) -> Result<(), String> {
        self.in_word = true;
        let start = self.at + 1;
        let end = self.chars[start..]
            .iter()
            .position(|&q| q == '\'')
            .ok_or("an unterminated single quote")?;
        for i in start..start + end {
            let c = self.chars[i];
            if c == '\0' {
                return Err("a NUL character".into());
            }
            self.word.chars.push(Char { c, quoted: true });
        }
        self.at = start + end + 1;
        Ok(())
    }

    fn double_quoted(&mut self) -> Result<(), String> {
        self.in_word = true;
        self.at += 1;
        loop {
            match self.peek(0) {
                None => return Err("an unterminated double quote".into()),
                Some('"') => {
                    self.at += 1;
                    return Ok(());
                }
                Some('$') => return Err(dollar(&self.chars, self.at)),
                Some('`') => {
                    return Err(
                        "command substitution (backquotes) computes words at run time".into(),
                    );
                }
                Some('\0') => return Err("a NUL character".into()),
                Some('\\') => {
                    match self.peek(1) {
                        Some(next @ ('"' | '\\' | '$' | '`')) => {
                            self.word.chars.push(Char {
                                c: next,
                                quoted: true,
                            });
                        }
                        Some('\n') => {}
                        Some(next) => {
                            self.word.chars.push(Char {
                                c: '\\',
                                quoted: true,
                            });
                            self.word.chars.push(Char {
                                c: next,
                                quoted: true,
                            });
                        }
                        None => return Err("an unterminated double quote".into()),
                    }
                    self.at += 2;
                }
                Some(c) => {
                    self.word.chars.push(Char { c, quoted: true });
                    self.at += 1;
                }
            }
        }
    }
}

/// Why a `$` at `i` is refused.
fn dollar(chars: &[char], i: usize) -> String {
    match chars.get(i + 1) {
        Some('(') => "command substitution `$(...)` computes words at run time".into(),
        Some('{') => "parameter expansion `${...}` is computed at run time".into(),
        Some('\'') => "`$'...'` strings are bash's alone".into(),
        _ => "a `$` expansion is computed at run time".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        tokenize(line)
            .unwrap()
            .into_iter()
            .filter_map(|t| match t {
                Token::Word(w) => Some(w.text()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn quotes_and_escapes_are_removed_and_remembered() {
        assert_eq!(
            words(r#"a 'b c' "d\"e" f\ g "h\x" ''"#),
            ["a", "b c", "d\"e", "f g", "h\\x", ""]
        );
        let Token::Word(w) = &tokenize("'*'x*").unwrap()[0] else {
            panic!()
        };
        assert!(w.chars[0].quoted && !w.chars[2].quoted);
    }

    #[test]
    fn descriptors_belong_to_the_operator_only_unquoted_and_adjacent() {
        let tokens = tokenize("2>x '2'>y 2 >z").unwrap();
        assert_eq!(
            tokens[0],
            Token::Redirect(RedirectOp {
                fd: Some(2),
                kind: OpKind::Write
            })
        );
        assert_eq!(words("2>x '2'>y 2 >z"), ["x", "2", "y", "2", "z"]);
        assert!(tokenize("3>x").is_err());
    }

    #[test]
    fn what_the_shells_read_differently_is_refused() {
        for line in [
            "a &> f", "a |& b", "a $x", "a `b`", "a <(b)", "a <<E", "(a)", "a ;; b",
        ] {
            assert!(tokenize(line).is_err(), "{line}");
        }
    }
}
