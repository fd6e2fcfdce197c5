//! PostgreSQL over TLS: a real server started with `ssl=on`, a certificate
//! for `localhost` signed by a CA this test makes, and `pg_hba.conf`
//! accepting TLS connections only. Each `sslmode` does what libpq's does,
//! and a certificate for another name, or from another CA, is refused
//! with the reason.
//!
//! The pgserver wheel's PostgreSQL is built without TLS, so the server here
//! is Debian's (`postgresql` package, installed by `.ci/setup`), or
//! `$KINET_PG_TLS_BIN`; the tests need no pgvector (the session store).
#![cfg(feature = "postgres")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

#[path = "support/pg_server.rs"]
mod pg_server;

use std::path::PathBuf;
use std::sync::OnceLock;

use kinet_core::Message;
use kinet_core::session::{JournalEntry, Session, SessionStore};
use kinet_memory::postgres::PostgresSessionStore;

struct Tls {
    server: pg_server::PgServer,
    /// The CA that signed the server's certificate.
    ca: PathBuf,
    /// A CA that did not.
    stranger: PathBuf,
    _dir: tempfile::TempDir,
}

fn ca(name: &str) -> (rcgen::CertificateParams, rcgen::KeyPair, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let pem = params.self_signed(&key).unwrap().pem();
    (params, key, pem)
}

fn tls() -> Option<&'static Tls> {
    static TLS: OnceLock<Option<Tls>> = OnceLock::new();
    TLS.get_or_init(|| {
        let Some(bin) = pg_server::find_tls_bin() else {
            assert!(
                std::env::var_os("KINET_REQUIRE_POSTGRES").is_none(),
                "PostgreSQL with TLS is required here (KINET_REQUIRE_POSTGRES) but none was found"
            );
            eprintln!(
                "\n!!! SKIPPED: PostgreSQL TLS tests: no PostgreSQL built with TLS (Debian's \
                 `postgresql` package, which .ci/setup installs, or KINET_PG_TLS_BIN). !!!\n"
            );
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let (ca_params, ca_key, ca_pem) = ca("kinet test CA");
        let (_, _, stranger_pem) = ca("another CA");
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let server_key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "localhost");
        let cert = params.signed_by(&server_key, &issuer).unwrap();
        let ca = dir.path().join("ca.pem");
        let stranger = dir.path().join("stranger.pem");
        std::fs::write(&ca, &ca_pem).unwrap();
        std::fs::write(&stranger, &stranger_pem).unwrap();
        let server = pg_server::start_tls(
            bin,
            &[
                ("server.crt", cert.pem().as_bytes()),
                ("server.key", server_key.serialize_pem().as_bytes()),
            ],
            "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'",
            // TLS connections only (and the local socket the harness uses).
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostssl all all ::1/128 trust\n",
        )
        .unwrap();
        Some(Tls {
            server,
            ca,
            stranger,
            _dir: dir,
        })
    })
    .as_ref()
}

impl Tls {
    fn url(&self, host: &str, options: &str) -> String {
        format!(
            "postgres://postgres@{host}:{}/postgres{options}",
            self.server.port
        )
    }
}

/// A session written and read back through the store at `url`.
fn round_trip(url: &str) -> Result<(), String> {
    let store = PostgresSessionStore::connect(url).map_err(|e| e.to_string())?;
    let id = format!("tls-{}", uuid_like());
    store
        .create(&Session::empty(&id))
        .map_err(|e| e.to_string())?;
    store
        .append(
            &id,
            &JournalEntry::Message {
                message: Message::user("over TLS"),
            },
        )
        .map_err(|e| e.to_string())?;
    let session = SessionStore::load(&store, &id)
        .map_err(|e| e.to_string())?
        .ok_or("the session is gone")?;
    assert_eq!(session.conversation.messages[0].text(), "over TLS");
    Ok(())
}

fn uuid_like() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

#[test]
fn verify_full_accepts_the_right_name_and_refuses_another() {
    let Some(tls) = tls() else { return };
    let ca = tls.ca.display();
    round_trip(&tls.url(
        "localhost",
        &format!("?sslmode=verify-full&sslrootcert={ca}"),
    ))
    .unwrap();
    // The certificate names localhost, not 127.0.0.1.
    let error = round_trip(&tls.url(
        "127.0.0.1",
        &format!("?sslmode=verify-full&sslrootcert={ca}"),
    ))
    .unwrap_err();
    assert!(error.contains("not valid for name"), "{error}");
    assert!(error.contains("127.0.0.1"), "{error}");
    assert!(
        error.contains("sslrootcert"),
        "the hint says what to check: {error}"
    );
    // A CA alone means verify-full.
    let error = round_trip(&tls.url("127.0.0.1", &format!("?sslrootcert={ca}"))).unwrap_err();
    assert!(error.contains("not valid for name"), "{error}");
    // The key=value form reads the same options.
    let pairs = format!(
        "host=localhost port={} user=postgres dbname=postgres sslmode=verify-full sslrootcert='{ca}'",
        tls.server.port
    );
    round_trip(&pairs).unwrap();
}

#[test]
fn a_certificate_from_another_ca_is_refused() {
    let Some(tls) = tls() else { return };
    for mode in ["verify-full", "verify-ca", "require"] {
        let url = tls.url(
            "localhost",
            &format!("?sslmode={mode}&sslrootcert={}", tls.stranger.display()),
        );
        let error = round_trip(&url).unwrap_err();
        assert!(
            error.contains("UnknownIssuer") || error.contains("issuer"),
            "{mode}: {error}"
        );
    }
}

#[test]
fn verify_ca_checks_the_ca_but_not_the_name() {
    let Some(tls) = tls() else { return };
    round_trip(&tls.url(
        "127.0.0.1",
        &format!("?sslmode=verify-ca&sslrootcert={}", tls.ca.display()),
    ))
    .unwrap();
}

#[test]
fn require_and_prefer_encrypt_and_disable_is_refused_by_this_server() {
    let Some(tls) = tls() else { return };
    round_trip(&tls.url("127.0.0.1", "?sslmode=require")).unwrap();
    // The default (prefer) takes the TLS the server offers.
    round_trip(&tls.url("127.0.0.1", "")).unwrap();
    // The server accepts TLS connections only: a plain one is refused, by
    // the server, naming the reason.
    let error = round_trip(&tls.url("127.0.0.1", "?sslmode=disable")).unwrap_err();
    assert!(error.contains("no encryption"), "{error}");
}

#[test]
fn verifying_modes_without_a_ca_say_where_to_put_one() {
    // The store reads ~/.postgresql/root.crt as libpq does; HOME is this
    // process's, so the check runs in a child with an empty HOME. It fails
    // before connecting: no server is needed.
    if std::env::var_os("KINET_TLS_CHILD").is_some() {
        let error =
            round_trip("postgres://postgres@localhost:1/postgres?sslmode=verify-full").unwrap_err();
        assert!(
            error.contains("root.crt") && error.contains("sslrootcert"),
            "{error}"
        );
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "verifying_modes_without_a_ca_say_where_to_put_one",
            "--nocapture",
        ])
        .env("KINET_TLS_CHILD", "1")
        .env("HOME", home.path())
        .status()
        .unwrap();
    assert!(status.success());
}
