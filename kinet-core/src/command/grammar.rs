//! The structure of a command line: lists of and-or lists of pipelines of
//! simple commands, as POSIX writes it (and dash and bash agree). Words
//! are kept as written; the planner expands them.

use super::lex::{OpKind, RedirectOp, Token, Word, tokenize};

/// A parsed command line: `;`, `&` and newline separated items.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Script {
    pub(crate) items: Vec<Item>,
}

/// `a && b || c`, maybe in the background.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Item {
    pub(crate) first: Vec<Simple>,
    pub(crate) rest: Vec<(super::Connector, Vec<Simple>)>,
    pub(crate) background: bool,
}

/// One simple command as written: assignments, words, redirections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Simple {
    pub(crate) assignments: Vec<(String, Word)>,
    pub(crate) words: Vec<Word>,
    pub(crate) redirects: Vec<(RedirectOp, Word)>,
}

/// Words that start a compound command or are reserved in one of the
/// shells, when unquoted in the program's place.
const KEYWORDS: &[&str] = &[
    "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac",
    "in", "function", "select", "{", "}", "!", "[[", "]]", "coproc", "time",
];

/// Parses `line`; `Err` says why it cannot be proven to be a plain list
/// of simple commands.
pub(crate) fn parse(line: &str) -> Result<Script, String> {
    let mut parser = Parser::default();
    for token in tokenize(line)? {
        parser.token(token)?;
    }
    parser.finish()
}

#[derive(Default)]
struct Parser {
    script: Script,
    /// The and-or list being built.
    first: Option<Vec<Simple>>,
    rest: Vec<(super::Connector, Vec<Simple>)>,
    /// The pipeline being built.
    pipeline: Vec<Simple>,
    simple: Simple,
    /// A redirection waiting for its word.
    redirect: Option<RedirectOp>,
    /// After `|`, `&&` or `||`: a command must follow (newlines allowed).
    expecting: Option<&'static str>,
    /// The connector the pipeline being built follows.
    connector: Option<super::Connector>,
}

fn syntax(what: &str) -> String {
    format!("a syntax error ({what})")
}

impl Parser {
    fn simple_is_empty(&self) -> bool {
        self.simple.words.is_empty()
            && self.simple.assignments.is_empty()
            && self.simple.redirects.is_empty()
    }

    fn token(&mut self, token: Token) -> Result<(), String> {
        if let Some(op) = self.redirect.take() {
            let Token::Word(word) = token else {
                return Err(syntax("a redirection without a target"));
            };
            self.simple.redirects.push((op, word));
            return Ok(());
        }
        match token {
            Token::Word(word) => {
                self.expecting = None;
                if self.simple.words.is_empty()
                    && let Some(assignment) = word.assignment()
                {
                    self.simple.assignments.push(assignment);
                } else {
                    if self.simple.words.is_empty() && word.unquoted() {
                        let text = word.text();
                        if KEYWORDS.contains(&text.as_str()) {
                            return Err(format!("`{text}` starts a compound command"));
                        }
                    }
                    self.simple.words.push(word);
                }
            }
            Token::Redirect(op) => {
                self.expecting = None;
                self.redirect = Some(op);
            }
            Token::Pipe => {
                self.end_simple("`|`")?;
                self.expecting = Some("`|`");
            }
            Token::And | Token::Or => {
                let what = if token == Token::And { "`&&`" } else { "`||`" };
                self.end_simple(what)?;
                self.end_pipeline();
                self.connector = Some(if token == Token::And {
                    super::Connector::And
                } else {
                    super::Connector::Or
                });
                self.expecting = Some(what);
            }
            Token::Semi | Token::Amp => {
                let what = if token == Token::Semi { "`;`" } else { "`&`" };
                if self.expecting.is_some() || self.simple_is_empty() && self.pipeline.is_empty() {
                    return Err(syntax(&format!("nothing before {what}")));
                }
                self.end_item(token == Token::Amp)?;
            }
            Token::Newline => {
                if self.expecting.is_some() {
                    return Ok(());
                }
                if !(self.simple_is_empty() && self.pipeline.is_empty() && self.first.is_none()) {
                    self.end_item(false)?;
                }
            }
        }
        Ok(())
    }

    fn end_simple(&mut self, before: &str) -> Result<(), String> {
        if self.expecting.is_some() || self.simple_is_empty() {
            return Err(syntax(&format!("no command before {before}")));
        }
        if self.simple.words.is_empty() {
            return Err(if self.simple.redirects.is_empty() {
                "assignments alone change the shell's variables".into()
            } else {
                "a redirection without a command".into()
            });
        }
        self.pipeline.push(std::mem::take(&mut self.simple));
        Ok(())
    }

    fn end_pipeline(&mut self) {
        let pipeline = std::mem::take(&mut self.pipeline);
        match self.connector.take() {
            Some(connector) => self.rest.push((connector, pipeline)),
            None => self.first = Some(pipeline),
        }
    }

    fn end_item(&mut self, background: bool) -> Result<(), String> {
        self.end_simple("the end of the command")?;
        self.end_pipeline();
        let first = self.first.take().unwrap_or_default();
        self.script.items.push(Item {
            first,
            rest: std::mem::take(&mut self.rest),
            background,
        });
        Ok(())
    }

    fn finish(mut self) -> Result<Script, String> {
        if self.redirect.is_some() {
            return Err(syntax("a redirection without a target"));
        }
        if let Some(what) = self.expecting {
            return Err(syntax(&format!("nothing after {what}")));
        }
        if !(self.simple_is_empty() && self.pipeline.is_empty() && self.first.is_none()) {
            self.end_item(false)?;
        }
        Ok(self.script)
    }
}

/// A redirection's operator as written, for messages.
pub(crate) fn op_text(op: RedirectOp) -> String {
    let mut text = op.fd.map(|fd| fd.to_string()).unwrap_or_default();
    text.push_str(match op.kind {
        OpKind::Read => "<",
        OpKind::Write => ">",
        OpKind::Append => ">>",
        OpKind::DupOut => ">&",
        OpKind::DupIn => "<&",
    });
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(line: &str) -> Vec<Vec<usize>> {
        parse(line)
            .unwrap()
            .items
            .iter()
            .map(|item| {
                std::iter::once(item.first.len())
                    .chain(item.rest.iter().map(|(_, p)| p.len()))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn lists_and_pipelines() {
        assert_eq!(
            shape("a | b && c || d | e; f & g\n\nh"),
            [vec![2, 1, 2], vec![1], vec![1], vec![1]]
        );
        assert_eq!(shape("a &&\n b |\n c"), [vec![1, 2]]);
        assert_eq!(shape("# only a comment"), Vec::<Vec<usize>>::new());
        let script = parse("X=1 Y='a b' ls -l >out 2>&1").unwrap();
        let simple = &script.items[0].first[0];
        assert_eq!(simple.assignments.len(), 2);
        assert_eq!(simple.words.len(), 2);
        assert_eq!(simple.redirects.len(), 2);
        // After the program, an assignment is an argument.
        let script = parse("make X=1").unwrap();
        assert_eq!(script.items[0].first[0].words.len(), 2);
    }

    #[test]
    fn syntax_errors_and_compound_commands_are_refused() {
        for line in [
            "; a",
            "a ; ; b",
            "a &&",
            "| a",
            "a | | b",
            "a & ;",
            "> f",
            "X=1",
            "if a; then b; fi",
            "! a",
            "{ a; }",
            "time a",
            "a >",
        ] {
            assert!(parse(line).is_err(), "{line}: {:?}", parse(line));
        }
        // Quoted, a keyword is a program's name.
        assert!(parse("'if' x").is_ok());
    }
}
