use super::*;
use crate::command::Planned;

fn planned(line: &str) -> Plan {
    match plan(line, &Context::examples()) {
        Planned::Plan(plan) => plan,
        Planned::Unsure(why) => panic!("{line}: unsure: {why}"),
    }
}

fn unsure(line: &str) -> String {
    match plan(line, &Context::examples()) {
        Planned::Unsure(why) => why,
        Planned::Plan(plan) => panic!("{line}: planned {plan:?}"),
    }
}

/// Each program's (target name, target args, argv as executed).
fn targets(line: &str) -> Vec<(String, Vec<String>, Vec<String>)> {
    planned(line)
        .invocations()
        .map(|i| {
            (
                i.target.name().to_owned(),
                i.target.args.clone(),
                i.argv.clone(),
            )
        })
        .collect()
}

fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

#[test]
fn wrappers_run_the_resolved_program_the_rules_see() {
    let [(name, args, argv)] = &targets("nice -n 5 ls -l")[..] else {
        panic!()
    };
    assert_eq!(name, "ls");
    assert_eq!(args, &strings(&["-l"]));
    assert_eq!(argv, &strings(&["nice", "-n", "5", "/usr/bin/ls", "-l"]));
    let [(name, _, argv)] = &targets("timeout -k1 5 env -u X K=1 nohup stdbuf -oL cat f")[..]
    else {
        panic!()
    };
    assert_eq!(name, "cat");
    assert_eq!(argv[2], "5");
    let plan = planned("env -i K=1 ls");
    let invocation = plan.invocations().next().unwrap();
    assert_eq!(invocation.target.env, [("K".to_owned(), "1".to_owned())]);
    assert_eq!(invocation.wrappers, ["env"]);
    let plan = planned("xargs -I{} cat {}");
    let target = &plan.invocations().next().unwrap().target;
    assert!(target.open_args && target.name() == "cat");
    assert_eq!(
        planned("xargs").invocations().next().unwrap().target.name(),
        "echo"
    );
}

#[test]
fn assignments_and_prefixes_are_kept() {
    let plan = planned("X=1 Y=~/b exec ls");
    let invocation = plan.invocations().next().unwrap();
    assert_eq!(
        invocation.env,
        [
            ("X".into(), "1".into()),
            ("Y".into(), "/home/user/b".into())
        ]
    );
    assert!(invocation.exec);
    assert_eq!(targets("command -- ls")[0].0, "ls");
    assert_eq!(
        targets("'cat' \"a b\" c\\ d")[0].1,
        strings(&["a b", "c d"])
    );
    assert_eq!(targets("cat ~/x")[0].1, strings(&["/home/user/x"]));
}

#[test]
fn paths_are_not_system_programs() {
    let plan = planned("./ls; bin/ls; /usr/bin/ls");
    let systems: Vec<bool> = plan.invocations().map(|i| i.target.system).collect();
    assert_eq!(systems, [false, false, true]);
    // A wrapper given by a relative path is not a wrapper.
    assert_eq!(targets("./env ls")[0].0, "env");
}

#[test]
fn nested_shells_are_planned_as_their_scripts() {
    let plan = planned("sh -c 'ls && cat x' > /dev/null; bash -c \"echo hi\"");
    let names: Vec<_> = plan
        .invocations()
        .map(|i| i.target.name().to_owned())
        .collect();
    assert_eq!(names, ["ls", "cat", "echo"]);
    let Command::Shell(nested) = &plan.items[0].first.commands[0] else {
        panic!()
    };
    assert_eq!(nested.redirects.len(), 1);
    for line in [
        "sh script.sh",
        "bash -ec 'ls'",
        "sh",
        "X=1 sh -c ls",
        "nice sh -c ls",
        "sh -c 'cat < /dev/tcp/h/80'",
        "bash -c 'ls &> x'",
    ] {
        unsure(line);
    }
}

#[test]
fn redirections() {
    let plan = planned("ls 2>&1 >/dev/null <in 2>>log");
    let redirects = &plan.invocations().next().unwrap().redirects;
    assert_eq!(redirects[0].kind, RedirectKind::Dup(1));
    assert_eq!(redirects[0].fd, 2);
    assert!(redirects[1].writes().is_none());
    assert!(matches!(redirects[2].kind, RedirectKind::Read(_)));
    assert_eq!(redirects[3].writes(), Some("log"));
    assert!(!redirects[3].file().unwrap().outside_roots);
    let plan = planned("cat < /etc/passwd");
    assert!(
        plan.invocations().next().unwrap().redirects[0]
            .file()
            .unwrap()
            .outside_roots
    );
}

#[test]
fn what_only_a_shell_knows_is_unsure() {
    for line in [
        "cd x && ls",
        "export X=1",
        "echo {a,b}",
        "echo {1..3}",
        "echo a=~/x",
        "time -o f ls",
        "exec -a name ls",
        "exec 2>&1",
        "command -v ls",
        "env -S 'rm x' ls",
        "env --sp=ls",
        "ls >&file",
        "ls 2>&-",
        "ls > *.txt",
        "cat < /dev/udp/h/53",
        "ls | xargs -I {} {} x",
        "echo ~root",
        "X=a:~/b ls",
        "'' x",
        "builtin echo",
        "exec command ls",
        "exec exec ls",
        "exec ls < in.txt",
    ] {
        unsure(line);
    }
    // Brace words without a list or range are literal in both shells.
    assert_eq!(targets("echo {} {a}")[0].1, strings(&["{}", "{a}"]));
}

#[test]
fn globs_only_where_nothing_ran_before() {
    assert!(unsure("ls; ls *").contains("comes after"));
    assert!(unsure("ls > out | cat *").contains("comes after"));
    assert!(unsure("ls * | sh -c 'ls > x'").contains("comes after"));
    assert!(unsure("sleep 1 & ls").contains("background"));
    assert_eq!(targets("git diff *")[0].1, strings(&["diff", "*"]));
}

#[test]
fn display_names_programs_by_their_paths() {
    assert_eq!(
        planned("ls 'a b' | wc -l && nice cat x 2>/dev/null").display(),
        "/usr/bin/ls 'a b' | /usr/bin/wc -l && /usr/bin/nice /usr/bin/cat x 2>/dev/null"
    );
}
