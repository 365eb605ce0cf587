use std::time::Duration;

use super::parse;

fn read(text: &str) -> anyhow::Result<super::Workflow> {
    parse(text, None, None)
}

#[test]
fn every_key_a_github_user_writes_for_a_run_step() {
    let workflow = read(
        "env:\n  A: 1\n  B: yes\ncaches:\n  - key: cargo\n    path: /root/.cargo\nsteps:\n\
         - name: build\n  run: |\n    make\n    make test\n  env:\n    CC: clang\n  timeout-minutes: 1.5\n\
         - run: lint --all\n  continue-on-error: true\n\
         - name: upload\n  if: ${{ always() }}\n  run: cp x /outputs\n",
    )
    .unwrap();
    assert_eq!(
        workflow.env,
        [("A".into(), "1".into()), ("B".into(), "yes".into())]
    );
    assert_eq!(workflow.caches[0].path, "/root/.cargo");
    let [build, lint, upload] = &workflow.steps[..] else {
        panic!("{:?}", workflow.steps)
    };
    assert_eq!(build.script, "make\nmake test\n");
    assert_eq!(build.env, [("CC".into(), "clang".into())]);
    assert_eq!(build.timeout, Some(Duration::from_secs(90)));
    assert_eq!(lint.name, "#2 run lint --all");
    assert!(lint.continue_on_error && !lint.always);
    assert_eq!(
        upload
            .condition
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some("always()")
    );
    assert!(!upload.continue_on_error);
}

#[test]
fn services_with_their_image_command_variables_and_check() {
    let workflow = read(
        "services:\n  db:\n    image: postgres:16\n    env:\n      POSTGRES_PASSWORD: pw\n    ready: tcp:5432\n\
         \x20 web:\n    image: busybox\n    command: httpd -f\n    ready: 'exec:true'\nsteps:\n  - run: x\n",
    )
    .unwrap();
    let [db, web] = &workflow.services[..] else {
        panic!("{:?}", workflow.services)
    };
    assert_eq!(db.ready, Some(executor_core::Readiness::Tcp(5432)));
    assert_eq!(db.env, [("POSTGRES_PASSWORD".into(), "pw".into())]);
    assert_eq!(web.command.as_deref(), Some("httpd -f"));
    let err =
        read("services:\n  db:\n    image: x\n    volumes: [x]\nsteps:\n  - run: x\n").unwrap_err();
    let text = format!("{err:#}");
    assert!(
        text.contains("unknown field `volumes`") && text.contains("line 4"),
        "{text}"
    );
    let err = read("services:\n  Db:\n    image: x\nsteps:\n  - run: x\n").unwrap_err();
    assert!(format!("{err:#}").contains("services: Db"), "{err:#}");
}

#[test]
fn an_unknown_key_is_refused_with_its_line() {
    let err = read("steps:\n  - name: a\n    run: true\n    timeout-minute: 3\n").unwrap_err();
    let text = format!("{err:#}");
    assert!(text.contains("unknown field `timeout-minute`"), "{text}");
    assert!(text.contains("line 4"), "{text}");
}

#[test]
fn an_unknown_top_level_key_has_its_line_and_column() {
    let err = read("env:\n  A: 1\nstepz:\n  - run: x\n").unwrap_err();
    let text = format!("{err:#}");
    assert!(
        text.contains("unknown field `stepz`") && text.contains("at line 3 column 1"),
        "{text}"
    );
}

#[test]
fn uses_and_strategy_say_this_runner_runs_run_steps_only() {
    for (yaml, says) in [
        (
            "steps:\n  - name: a\n    run: true\n  - uses: actions/checkout@v4\n",
            "uses: at line 4 column 5",
        ),
        (
            "jobs:\n  t:\n    runs-on: x\n    strategy:\n      matrix: {a: [1]}\n    steps:\n      - run: x\n",
            "strategy: at line 4 column 5",
        ),
        (
            "jobs:\n  t:\n    uses: ./.github/workflows/x.yml\n",
            "uses: at line 3 column 5",
        ),
    ] {
        let text = format!("{:#}", read(yaml).unwrap_err());
        assert!(text.contains(says), "{yaml}: {text}");
    }
}

const ACTIONS_FILE: &str = "name: ci
on:
  push:
    branches: [main]
env:
  GREETING: hello
jobs:
  lint:
    runs-on: ubuntu-latest
    steps:
      - run: echo lint
  test:
    runs-on: ubuntu-latest
    container:
      image: busybox:ci
      env:
        MODE: ci
    timeout-minutes: 10
    defaults:
      run:
        working-directory: src
    env:
      TOKEN: ${{ secrets.DEPLOY_TOKEN }}
    services:
      db:
        image: postgres:16
        env:
          POSTGRES_PASSWORD: test
        ports: ['5432:5432']
        options: >-
          --health-cmd \"pg_isready -U postgres\"
          --health-interval 10s
    steps:
      - id: version
        run: echo \"number=1.2\" >> \"$GITHUB_OUTPUT\"
      - name: use
        shell: bash
        env:
          TAG: v${{ steps.version.outputs.number }}
        run: |
          echo '${{ steps.version.outputs.number }}' \"${{ env.GREETING }}\" ${{ job.status }}
      - name: notify
        if: failure() && steps.version.outputs.number != ''
        run: echo failed
";

#[test]
fn an_actions_file_with_its_job_header() {
    let err = read(ACTIONS_FILE).unwrap_err();
    assert!(
        format!("{err:#}").contains("2 jobs (lint, test): pick one with --job NAME"),
        "{err:#}"
    );
    let workflow = parse(ACTIONS_FILE, Some("test"), Some("ignored:flag")).unwrap();
    assert_eq!(workflow.image.as_deref(), Some("busybox:ci"));
    assert_eq!(workflow.timeout, Some(Duration::from_secs(600)));
    assert_eq!(
        workflow.env,
        [
            ("GREETING".into(), "hello".into()),
            ("MODE".into(), "ci".into())
        ]
    );
    assert_eq!(
        workflow.secret_aliases,
        [("TOKEN".to_string(), "DEPLOY_TOKEN".to_string())]
    );
    assert!(workflow.notes[0].contains("runs-on: ubuntu-latest is read and ignored"));
    let db = &workflow.services[0];
    assert_eq!(
        db.ready,
        Some(executor_core::Readiness::Exec(
            "pg_isready -U postgres".into()
        ))
    );
    let [version, using, notify] = &workflow.steps[..] else {
        panic!("{:?}", workflow.steps)
    };
    assert_eq!(version.id.as_deref(), Some("version"));
    assert!(
        version.script.starts_with("cd -- 'src';echo"),
        "{}",
        version.script
    );
    // Every value is a reference: inside single quotes they close and reopen.
    assert!(
        using
            .script
            .contains("'\\''\"${KNOTLESS_STEPS_VERSION_OUTPUTS_NUMBER}\"'\\''")
            && using
                .script
                .contains(" \"${GREETING}\" ${KNOTLESS_JOB_STATUS}"),
        "{}",
        using.script
    );
    assert!(using
        .script
        .contains("exec bash --noprofile --norc -eo pipefail -c"));
    assert!(using.script.contains("the image busybox:ci has no bash"));
    let inputs: Vec<String> = using
        .inputs
        .iter()
        .map(|(k, t)| format!("{k}={t}"))
        .collect();
    assert_eq!(
        inputs,
        [
            "TAG=v${{ steps.version.outputs.number }}",
            "KNOTLESS_STEPS_VERSION_OUTPUTS_NUMBER=${{ steps.version.outputs.number }}"
        ]
    );
    assert_eq!(
        notify
            .condition
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some("failure() && steps.version.outputs.number != ''")
    );
}

#[test]
fn refused_constructs_have_their_line_and_column() {
    for (yaml, says) in [
        (
            "steps:\n  - run: |\n      echo ok\n      echo ${{ github.sha }}\n",
            "steps[0] (\"#1 run echo ok\"): run: at line 4 column 16: github.sha is not taken",
        ),
        (
            "steps:\n  - run: x\n    if: success() && contains(env.A, 'b')\n",
            "if: at line 3 column 22: contains(...) is not taken",
        ),
        (
            "steps:\n  - run: x\n    shell: pwsh\n",
            "shell: \"pwsh\" at line 3 column 5",
        ),
        (
            "steps:\n  - run: x\n    env:\n      A: ${{ matrix.os }}\n",
            "A: at line 4 column 14: matrix.os is not taken",
        ),
        (
            "jobs:\n  t:\n    container:\n      image: x\n      options: --cpus 2 --entrypoint sh\n    steps:\n      - run: x\n",
            "options: at line 5 column 7: --entrypoint is not a flag this runner has",
        ),
        (
            "steps:\n  - name: build ${{ matrix.os }}\n    run: x\n",
            "name: at line 2 column 11: a step's name is plain text",
        ),
        (
            "jobs:\n  t:\n    container: ${{ env.IMAGE }}\n    steps:\n      - run: x\n",
            "container: image: at line 3 column 16",
        ),
        (
            "steps:\n  - id: 1st\n    run: x\n",
            "id: \"1st\" at line 2 column 5",
        ),
    ] {
        let text = format!("{:#}", read(yaml).unwrap_err());
        assert!(text.contains(says), "{yaml}: {text}");
    }
}

#[test]
fn a_value_is_never_pasted_into_a_script() {
    let workflow = read(
        "steps:\n  - id: a\n    run: x\n  - run: echo \"${{ steps.a.outputs.v }}\" ${{ secrets.TOKEN }}\n",
    )
    .unwrap();
    let script = &workflow.steps[1].script;
    assert_eq!(script, "echo \"${KNOTLESS_STEPS_A_OUTPUTS_V}\" ${TOKEN}");
    assert_eq!(workflow.secrets[0].0, "TOKEN");
}

#[test]
fn conditions_on_github_values_are_refused() {
    let err = read("steps:\n  - run: x\n    if: github.event_name == 'push'\n").unwrap_err();
    let text = format!("{err:#}");
    assert!(
        text.contains("steps[0]") && text.contains("github.event_name is not taken"),
        "{text}"
    );
}

#[test]
fn bad_values_name_where_they_are() {
    for (yaml, says) in [
        ("steps: []\n", "no steps"),
        (
            "steps:\n  - run: x\n    timeout-minutes: 0\n",
            "timeout-minutes",
        ),
        ("steps:\n  - run: x\n    env:\n      1A: x\n", "1A"),
        ("steps:\n  - run: x\n    env:\n      A: [1]\n", "A: a value"),
        (
            "caches:\n  - key: ../x\n    path: /a\nsteps:\n  - run: x\n",
            "caches",
        ),
        (
            "steps:\n  - name: a\n",
            "steps[0] (\"a\"): it has no run: script",
        ),
    ] {
        let text = format!("{:#}", read(yaml).unwrap_err());
        assert!(text.contains(says), "{yaml}: {text}");
    }
}
