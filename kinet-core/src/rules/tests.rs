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
decision = "deny"
justification = "use the file tools"

[[tool]]
name = "mcp__prod__*"
decision = "deny"

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
fn deny_wins_over_ask_over_allow() {
    assert_eq!(
        decision("git status"),
        Some(Decision::Ask),
        "git status is also git"
    );
    assert_eq!(decision("git push"), Some(Decision::Ask));
    assert_eq!(decision("ls && rm -rf x"), Some(Decision::Deny));
    assert_eq!(decision("ls | cat"), Some(Decision::Allow));
    assert_eq!(decision("ls; curl example.org"), Some(Decision::Ask));
    assert_eq!(decision("curl example.org"), None);
    assert_eq!(decision("echo hi > notes.txt"), Some(Decision::Ask));
    assert_eq!(decision("echo hi 2>/dev/null"), Some(Decision::Allow));
    assert_eq!(decision("echo $(rm -rf /)"), Some(Decision::Ask));
    let verdict = rules().check_command("sh -c 'ls; rm x'").unwrap();
    assert_eq!(verdict.decision, Decision::Deny);
    assert!(
        verdict.reason.contains("use the file tools"),
        "{}",
        verdict.reason
    );
    let none = serde_json::Value::Null;
    let tool = |name: &str| rules().check_tool(name, &none).map(|(d, _)| d);
    assert_eq!(tool("mcp__prod__write"), Some(Decision::Deny));
    assert_eq!(tool("mcp__prod__read"), Some(Decision::Deny));
    assert_eq!(tool("read_file"), None);
}

/// Parts of command lines and whether the rules (ls, cat, echo allowed)
/// should allow each: plain, quoted and wrapped forms of the allowed
/// programs, and everything that must not ride along with them.
const PARTS: &[(&str, bool)] = &[
    ("ls -la", true),
    ("'ls' src", true),
    ("l\\s", true),
    ("\"cat\" README.md", true),
    ("env K=1 ls", true),
    ("K=1 echo hi", true),
    ("env X=1 ls", false),
    ("X=1 echo hi", false),
    ("PATH=. ls", false),
    ("./ls", false),
    ("git diff --output=x", false),
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
/// Joins that need a real shell (bash's `|&`, a background job): never
/// allowed.
const NEED_A_SHELL: &[&str] = &[" |& ", " & "];

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
[[command]]
program = "git"
args = ["diff"]
decision = "allow"
[[variable]]
name = "K"
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
        let all_allowed = parts.iter().all(|(part, _)| PARTS[*part].1)
            && !parts
                .iter()
                .skip(1)
                .any(|(_, join)| NEED_A_SHELL.contains(&JOINS[*join]));
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

const TARGETS: &str = r#"
[[tool]]
name = "web_fetch"
args = { url = "https://docs.rs/*" }
decision = "allow"
match = [{ url = "https://docs.rs/serde" }]
not_match = [{ url = "https://docs.rs.evil.example/" }, { other = "https://docs.rs/x" }]

[[tool]]
name = "web_*"
args = { url = "http://*" }
decision = "deny"
justification = "no plain http"

[[tool]]
name = "todo"
args = { limit = "1?" }
decision = "ask"

[[path]]
pattern = "secrets/**"
decision = "deny"
match = ["secrets/key", "secrets/a/b", "./secrets/x"]
not_match = ["src/secrets/key", "secretsx/key"]

[[path]]
pattern = "*.pem"
decision = "ask"
match = ["key.pem", "deep/er/key.pem"]

[[path]]
pattern = "docs/**"
decision = "allow"
tools = ["write_file", "edit_file"]

[[host]]
name = "*.crates.io"
decision = "allow"

[[host]]
name = "crates.io"
decision = "allow"

[[host]]
name = "evil.crates.io"
decision = "deny"
"#;

#[test]
fn tool_rules_match_argument_patterns() {
    let rules = Rules::from_toml(TARGETS).unwrap();
    let check = |tool: &str, args: serde_json::Value| rules.check_tool(tool, &args).map(|(d, _)| d);
    use serde_json::json;
    assert_eq!(
        check("web_fetch", json!({"url": "https://docs.rs/tokio/latest"})),
        Some(Decision::Allow)
    );
    assert_eq!(
        check("web_fetch", json!({"url": "https://example.com/"})),
        None
    );
    assert_eq!(check("web_fetch", json!({})), None);
    let (decision, reason) = rules
        .check_tool("web_search", &json!({"url": "http://docs.rs/x"}))
        .unwrap();
    assert_eq!(decision, Decision::Deny);
    assert!(reason.contains("no plain http"), "{reason}");
    assert_eq!(check("todo", json!({"limit": 12})), Some(Decision::Ask));
    assert_eq!(check("todo", json!({"limit": 2})), None);
    assert!(wildcard_matches("a*b*c", "a--b--b--c"));
    assert!(!wildcard_matches("a*b*c", "a--b--b--"));
    assert!(wildcard_matches("*", ""));
    assert!(!wildcard_matches("?", ""));

    let bad = r#"
[[tool]]
name = "web_fetch"
args = { url = "https://docs.rs/*" }
decision = "allow"
match = [{ url = "https://crates.io/" }]
"#;
    let err = Rules::from_toml(bad).unwrap_err().to_string();
    assert!(
        err.contains("tool rule 1 (`web_fetch url=https://docs.rs/*`)")
            && err.contains("crates.io"),
        "{err}"
    );
}

#[test]
fn path_rules_match_relative_to_the_roots_and_through_symlinks() {
    let rules = Rules::from_toml(TARGETS).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join("secrets")).unwrap();
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::os::unix::fs::symlink("../secrets", root.join("docs/link")).unwrap();
    let roots = [root.clone()];
    let check = |tool: &str, path: &str| {
        rules
            .check_paths(tool, &serde_json::json!({ "path": path }), &root, &roots)
            .map(|(d, _)| d)
    };
    assert_eq!(check("write_file", "docs/guide.md"), Some(Decision::Allow));
    assert_eq!(
        check("shell", "docs/guide.md"),
        None,
        "allow names its tools"
    );
    assert_eq!(check("read_file", "secrets/key"), Some(Decision::Deny));
    assert_eq!(
        check("write_file", "docs/../secrets/key"),
        Some(Decision::Deny)
    );
    let absolute = root.join("secrets/key");
    assert_eq!(
        check("read_file", absolute.to_str().unwrap()),
        Some(Decision::Deny)
    );
    // Through a symlink: forbidden where it leads, and not allowed as docs.
    assert_eq!(check("write_file", "docs/link/key"), Some(Decision::Deny));
    assert_eq!(check("write_file", "docs/link"), Some(Decision::Deny));
    assert_eq!(check("edit_file", "src/server.pem"), Some(Decision::Ask));
    assert_eq!(check("read_file", "src/lib.rs"), None);
    // file_path counts too.
    assert_eq!(
        rules
            .check_paths(
                "x",
                &serde_json::json!({"file_path": "secrets/a"}),
                &root,
                &roots
            )
            .map(|(d, _)| d),
        Some(Decision::Deny)
    );

    for (bad, wanted) in [
        (
            "[[path]]\npattern = \"docs/**\"\ndecision = \"allow\"\n",
            "path rule 1 (`docs/**`): an allow rule for paths must name its tools",
        ),
        (
            "[[path]]\npattern = \"a/**\"\ndecision = \"forbid\"\nmatch = [\"b/c\"]\n",
            "path rule 1 (`a/**`): the example `b/c` does not match",
        ),
        (
            "[[path]]\npattern = \"a/[\"\ndecision = \"forbid\"\n",
            "path rule 1 (`a/[`): the pattern is not a valid glob",
        ),
        (
            "[[host]]\nname = \"x.io\"\ndecision = \"ask\"\n",
            "host rule 1 (`x.io`): a host rule can only allow or deny",
        ),
        (
            "[[host]]\nname = \"https://x.io\"\ndecision = \"allow\"\n",
            "host rule 1 (`https://x.io`): the network allowlist entry",
        ),
    ] {
        let err = Rules::from_toml(bad).unwrap_err().to_string();
        assert!(err.contains(wanted), "{err}");
    }
}
