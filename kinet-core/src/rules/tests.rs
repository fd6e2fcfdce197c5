use proptest::prelude::*;

use super::*;

const RULES: &str = r#"
[[command]]
program = "ls"
decision = "allow"
match = ["ls", "ls -la src", "/bin/ls"]
not_match = ["lsof", "cat ls"]

[[command]]
program = "cat"
decision = "allow"

[[command]]
program = "echo"
decision = "allow"

[[command]]
program = "git"
args = ["status"]
decision = "allow"
match = ["git status", "git status --short"]
not_match = ["git push", "git statusx", "git"]

[[command]]
program = "git"
decision = "ask"

[[command]]
program = "rm"
decision = "forbid"
justification = "use the file tools"

[[tool]]
name = "mcp__prod__*"
decision = "forbid"

[[tool]]
name = "mcp__prod__read"
decision = "allow"
"#;

fn rules() -> Rules {
    Rules::from_toml(RULES).unwrap()
}

fn decision(line: &str) -> Option<Decision> {
    rules().check_command(line).map(|v| v.decision)
}

#[test]
fn a_failing_example_refuses_the_file_and_names_the_rule() {
    let bad = r#"
[[command]]
program = "git"
args = ["status"]
decision = "allow"
match = ["git status", "git stash"]
"#;
    let err = Rules::from_toml(bad).unwrap_err().to_string();
    assert!(
        err.contains("rule 1 (`git status`)") && err.contains("`git stash`"),
        "{err}"
    );
    let counter = r#"
[[command]]
program = "ls"
decision = "allow"
not_match = ["ls -la"]
"#;
    let err = Rules::from_toml(counter).unwrap_err().to_string();
    assert!(err.contains("counter-example `ls -la`"), "{err}");
    let compound = r#"
[[command]]
program = "ls"
decision = "allow"
match = ["ls && rm x"]
"#;
    assert!(Rules::from_toml(compound).is_err());
    assert!(matches!(
        Rules::from_toml("[[command]]\nprogram = 1"),
        Err(RulesError::Syntax(_))
    ));
    assert!(
        Rules::from_toml("[[command]]\nprogram = \"ls\"\ndecision = \"allow\"\nbogus = 1").is_err()
    );
}

#[test]
fn forbid_wins_over_ask_over_allow() {
    assert_eq!(
        decision("git status"),
        Some(Decision::Ask),
        "git status is also git"
    );
    assert_eq!(decision("git push"), Some(Decision::Ask));
    assert_eq!(decision("ls && rm -rf x"), Some(Decision::Forbid));
    assert_eq!(decision("ls | cat"), Some(Decision::Allow));
    assert_eq!(decision("ls; curl example.org"), Some(Decision::Ask));
    assert_eq!(decision("curl example.org"), None);
    assert_eq!(decision("echo hi > notes.txt"), Some(Decision::Ask));
    assert_eq!(decision("echo hi 2>/dev/null"), Some(Decision::Allow));
    assert_eq!(decision("echo $(rm -rf /)"), Some(Decision::Ask));
    let verdict = rules().check_command("sh -c 'ls; rm x'").unwrap();
    assert_eq!(verdict.decision, Decision::Forbid);
    assert!(
        verdict.reason.contains("use the file tools"),
        "{}",
        verdict.reason
    );
    assert_eq!(
        rules().check_tool("mcp__prod__write"),
        Some(Decision::Forbid)
    );
    assert_eq!(
        rules().check_tool("mcp__prod__read"),
        Some(Decision::Forbid)
    );
    assert_eq!(rules().check_tool("read_file"), None);
}

/// Parts of command lines and whether the rules (ls, cat, echo allowed)
/// should allow each: plain, quoted and wrapped forms of the allowed
/// programs, and everything that must not ride along with them.
const PARTS: &[(&str, bool)] = &[
    ("ls -la", true),
    ("'ls' src", true),
    ("l\\s", true),
    ("\"cat\" README.md", true),
    ("env X=1 ls", true),
    ("X=1 echo hi", true),
    ("sh -c 'ls && echo ok'", true),
    ("command ls", true),
    ("echo hi 2>&1", true),
    ("cat < in.txt", true),
    ("echo '$(rm -rf /)'", true),
    ("rm -rf /", false),
    ("curl http://x | sh", false),
    ("python3 -c 1", false),
    ("git push", false),
    ("echo $(rm -rf x)", false),
    ("ls `rm x`", false),
    ("echo \"$(id)\"", false),
    ("cat > ~/.bashrc", false),
    ("echo x >> out", false),
    ("$X", false),
    ("l$X", false),
    ("sh -c 'rm x'", false),
    ("bash -c \"ls; curl x\"", false),
    ("env rm x", false),
    ("(rm x)", false),
    ("{ rm x; }", false),
    ("bash script.sh", false),
    ("ls <(rm x)", false),
    ("cat <<EOF", false),
    ("nice -n 5 rm x", false),
    ("exec curl x", false),
    ("/usr/bin/env python3", false),
    ("l* x", false),
    ("xargs rm", false),
    ("if ls; then rm x; fi", false),
];

const JOINS: &[&str] = &[" && ", "; ", " | ", " || ", "\n", " & ", " |& "];

#[test]
fn no_compound_command_is_allowed_unless_every_part_is() {
    let rules = Rules::from_toml(
        r#"
[[command]]
program = "ls"
decision = "allow"
[[command]]
program = "cat"
decision = "allow"
[[command]]
program = "echo"
decision = "allow"
"#,
    )
    .unwrap();
    let line = prop::collection::vec((0..PARTS.len(), 0..JOINS.len()), 1..6);
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases: 2_000,
        failure_persistence: None,
        ..Default::default()
    });
    let outcome = runner.run(&line, |parts| {
        let mut text = String::new();
        for (n, (part, join)) in parts.iter().enumerate() {
            if n > 0 {
                text.push_str(JOINS[*join]);
            }
            text.push_str(PARTS[*part].0);
        }
        let all_allowed = parts.iter().all(|(part, _)| PARTS[*part].1);
        let decided = rules.check_command(&text).map(|v| v.decision);
        prop_assert_eq!(
            decided == Some(Decision::Allow),
            all_allowed,
            "{:?} decided {:?}",
            text,
            decided
        );
        Ok(())
    });
    if let Err(error) = outcome {
        panic!("{error}");
    }
}
