//! Credentials in a remote URL (`http://user:token@host/…`) never leave orch: a repo whose
//! remote carries one and cannot be reached fails its fetch, its clone and its job, and the
//! token appears in no error on stderr, no `--json` document, no log line, no row of the
//! database (`jobs.error`, the alert queued for the chat, the journal) and no log file.

use crate::support::Run;
use crate::support::sched::{Cfg, DEADLINE, Sched, tick_until};

const TOKEN: &str = "s3cr3t";

/// A remote with credentials on a port nothing listens on (as in `ext::gitea`'s tests).
const REMOTE_URL: &str = "http://user:s3cr3t@127.0.0.1:9/x.git";

fn clean(what: &str, text: &str) {
    assert!(!text.contains(TOKEN), "{what} holds the token:\n{text}");
}

fn clean_run(what: &str, r: &Run) {
    clean(&format!("stdout of {what}"), &r.stdout);
    clean(&format!("stderr of {what}"), &r.stderr);
}

/// The token was printed, stored and logged as part of the failed git command line
/// (`git clone http://user:s3cr3t@…`), in `jobs.error`, in the failure alert and in
/// `orch advance`'s error.
#[test]
fn a_token_in_a_remote_url_never_reaches_errors_logs_json_or_the_database() {
    let w = Sched::new(Cfg {
        max_attempts: 1,
        ..Cfg::default()
    });
    // The remote carries credentials; a chat is configured (nothing listens there either), so
    // the failure alert is also queued as a message.
    let text = std::fs::read_to_string(&w.config).unwrap();
    let text = text.replace(&format!("{:?}", w.remote.display().to_string()), REMOTE_URL);
    assert!(text.contains(REMOTE_URL), "{text}");
    std::fs::write(
        &w.config,
        format!(
            "{text}chat: {{kind: telegram, base_url: \"http://127.0.0.1:9\", \
             token_env: ORCH_TEST_UNSET_TG_TOKEN, chat_id: \"-100123\"}}\n"
        ),
    )
    .unwrap();

    let wi = w.add("Unreachable remote", &[]);

    // A failed fetch is an error on stderr that still names the remote, masked.
    for log in ["warn", "debug"] {
        let r = w.orch_with(&["advance", &wi, "--json"], &[("ORCH_LOG", log)]);
        assert_ne!(r.code, 0, "{r:?}");
        clean_run(&format!("orch advance (ORCH_LOG={log})"), &r);
        assert!(r.stderr.contains("127.0.0.1:9"), "{r:?}");
        if log == "debug" {
            assert!(r.stderr.contains("http://***@127.0.0.1:9/x.git"), "{r:?}");
        }
    }

    // The job fails for good (one attempt): its clone fails in the supervisor.
    let ticks = tick_until(
        &w,
        &[],
        |w| w.job(&wi, "analyst").is_some_and(|j| j.status == "failed"),
        DEADLINE,
    );
    clean("the output of the ticks", &ticks);
    let job = w.job(&wi, "analyst").unwrap();
    let error = w.job_error(job.id);
    assert!(
        error.contains("***@127.0.0.1:9"),
        "the error still names the remote: {error}"
    );
    clean("jobs.error", &error);
    let alert = w.sql("SELECT payload FROM outbox WHERE kind = 'chat.message'");
    assert!(alert.contains("failed after 1 attempt"), "{alert}");
    clean("the chat alert", &alert);

    // Every command an operator reads the failure with.
    for args in [
        vec!["tick", "--json"],
        vec!["task", "show", &wi, "--json"],
        vec!["task", "show", &wi],
        vec!["queue", "--json"],
        vec!["why", &wi, "--json"],
        vec!["outbox", "--json"],
        vec!["doctor", "--json"],
        vec!["fsck", "--json"],
    ] {
        let r = w.orch_with(&args, &[("ORCH_LOG", "debug")]);
        clean_run(&format!("orch {args:?}"), &r);
    }

    // Nothing in the database, its write-ahead log, or any log file holds it.
    let mut files = vec![w.db_path(), w.state_dir().join("orch.db-wal")];
    files.extend(
        std::fs::read_dir(w.state_dir().join("logs"))
            .unwrap()
            .flatten()
            .map(|e| e.path()),
    );
    let mut read = 0;
    for f in files {
        let Ok(bytes) = std::fs::read(&f) else {
            continue;
        };
        read += 1;
        assert!(
            !bytes.windows(TOKEN.len()).any(|w| w == TOKEN.as_bytes()),
            "`{}` holds the token",
            f.display()
        );
    }
    assert!(read >= 2, "the database and a job log were read");
}
