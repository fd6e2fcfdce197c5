//! TLS for PostgreSQL connections (rustls), chosen by the connection
//! string's `sslmode` and `sslrootcert` as libpq reads them.
//!
//! | `sslmode` | TLS | certificate checked |
//! |---|---|---|
//! | `disable` | never | — |
//! | `allow`, `prefer` (the default without a CA) | if the server offers it | no |
//! | `require` | always | no (as libpq, unless a CA is given: then as `verify-ca`) |
//! | `verify-ca` | always | signed by the CA |
//! | `verify-full` (the default when a CA is given) | always | signed by the CA and naming the host |
//!
//! `sslrootcert` is a PEM file of CA certificates, or `system` for the
//! operating system's store; without it, `verify-ca` and `verify-full` use
//! `~/.postgresql/root.crt` as libpq does, and say so when it is missing.
//!
//! One option is kinet's own, as in pgx's connection strings:
//! `pool_max_conns`, the most connections the pool keeps (default: this
//! machine's cores, at least 2).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_postgres::config::SslMode as WireMode;

use crate::MemoryError;

/// How a connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// A parsed connection string and the TLS connector it asks for.
pub(crate) struct Connect {
    pub(crate) config: tokio_postgres::Config,
    /// `None`: plain connections only (`sslmode=disable`).
    pub(crate) tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    pub(crate) mode: SslMode,
    /// Connections the pool keeps at most (`pool_max_conns`).
    pub(crate) pool_size: usize,
}

/// Connections a pool keeps at most when the connection string does not
/// say (`pool_max_conns`): this machine's cores, at least 2. A database
/// runs about as many statements at once as it has cores; more
/// connections only share those cores, so each statement takes longer and
/// the slowest turns much longer (on 2 cores, 8 connections made a
/// served turn's p99 2.4 times its p50; 2 made it 1.4 times, at the same
/// throughput). The default assumes the database has as many cores as
/// this machine, as it does when it runs here; name a bigger server's
/// count in the connection string.
fn default_pool_size() -> usize {
    std::thread::available_parallelism().map_or(2, |cores| cores.get().max(2))
}

/// The most `pool_max_conns` may be.
const MAX_POOL_SIZE: usize = 1000;

/// Reads `url` (a `postgres://` URL or `key=value` pairs), taking out what
/// tokio-postgres does not know (`sslrootcert`, the verifying modes).
pub(crate) fn parse(url: &str, target: &str) -> Result<Connect, MemoryError> {
    let bad = |message: String| MemoryError::Open {
        path: target.to_owned(),
        message,
    };
    let (rest, options) = split_options(url);
    let mut mode = None;
    let mut root = None;
    let mut pool_size = None;
    let mut kept = Vec::new();
    for option in options {
        let (key, value) = (option.key.as_str(), option.value.as_str());
        match key {
            "sslmode" => {
                mode = Some(match value {
                    "disable" => SslMode::Disable,
                    "allow" | "prefer" => SslMode::Prefer,
                    "require" => SslMode::Require,
                    "verify-ca" => SslMode::VerifyCa,
                    "verify-full" => SslMode::VerifyFull,
                    other => {
                        return Err(bad(format!(
                            "unknown sslmode `{other}`; use disable, prefer, require, verify-ca or verify-full"
                        )));
                    }
                });
            }
            "sslrootcert" => root = Some(value.to_owned()),
            "pool_max_conns" => {
                pool_size = Some(
                    value
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=MAX_POOL_SIZE).contains(n))
                        .ok_or_else(|| {
                            bad(format!(
                                "pool_max_conns `{value}` is not a number of connections; use 1 to {MAX_POOL_SIZE}"
                            ))
                        })?,
                );
            }
            "sslcert" | "sslkey" | "sslpassword" => {
                return Err(bad(format!(
                    "`{key}` (client certificates) is not supported; authenticate with a password \
                     or another method the server allows"
                )));
            }
            _ => kept.push(option),
        }
    }
    // A CA given without a mode means the CA is to be checked, fully.
    let mode = match (mode, &root) {
        (Some(SslMode::Require), Some(_)) => SslMode::VerifyCa,
        (Some(mode), _) => mode,
        (None, Some(_)) => SslMode::VerifyFull,
        (None, None) => SslMode::Prefer,
    };
    let mut config: tokio_postgres::Config = join_options(&rest, &kept)
        .parse()
        .map_err(|e: tokio_postgres::Error| bad(e.to_string()))?;
    config.ssl_mode(match mode {
        SslMode::Disable => WireMode::Disable,
        SslMode::Prefer => WireMode::Prefer,
        _ => WireMode::Require,
    });
    let tls = match mode {
        SslMode::Disable => None,
        _ => Some(tokio_postgres_rustls::MakeRustlsConnect::new(
            client_config(mode, root.as_deref()).map_err(bad)?,
        )),
    };
    Ok(Connect {
        config,
        tls,
        mode,
        pool_size: pool_size.unwrap_or_else(default_pool_size),
    })
}

/// The rustls settings for `mode`.
fn client_config(mode: SslMode, root: Option<&str>) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let verifier: Arc<dyn ServerCertVerifier> = match mode {
        SslMode::VerifyCa | SslMode::VerifyFull => {
            let roots = Arc::new(roots(root)?);
            let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
                roots,
                Arc::clone(&provider),
            )
            .build()
            .map_err(|e| format!("the CA certificates cannot be used: {e}"))?;
            if mode == SslMode::VerifyFull {
                webpki
            } else {
                Arc::new(AnyName(webpki))
            }
        }
        _ => Arc::new(Unchecked(provider)),
    };
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth())
}

/// The CA certificates to check the server's against.
fn roots(root: Option<&str>) -> Result<rustls::RootCertStore, String> {
    let mut store = rustls::RootCertStore::empty();
    if root == Some("system") {
        let found = rustls_native_certs::load_native_certs();
        for cert in found.certs {
            let _ = store.add(cert);
        }
        if store.is_empty() {
            return Err("sslrootcert=system, but the system has no CA certificates".into());
        }
        return Ok(store);
    }
    let path: PathBuf = match root {
        Some(path) => PathBuf::from(path),
        None => {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default();
            let default = home.join(".postgresql/root.crt");
            if !default.is_file() {
                return Err(format!(
                    "the sslmode checks the server's certificate, but no CA is given: set sslrootcert \
                     to the CA's PEM file (or `system`), or put it at {}",
                    default.display()
                ));
            }
            default
        }
    };
    let certs = read_certs(&path)?;
    for cert in certs {
        store
            .add(cert)
            .map_err(|e| format!("{}: a certificate cannot be used: {e}", path.display()))?;
    }
    Ok(store)
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read sslrootcert {}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("sslrootcert {} is not PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "sslrootcert {} holds no certificate",
            path.display()
        ));
    }
    Ok(certs)
}

/// `verify-ca`: the chain must lead to the CA; the name is not compared.
#[derive(Debug)]
struct AnyName(Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::{CertificateError, Error};
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` and `require` without a CA: encrypted, the certificate taken
/// as it comes (what libpq does in these modes). The handshake's
/// signatures are still checked, so the peer holds the certificate's key.
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// One option of a connection string: its key and value, decoded, and as
/// written (a URL's query keeps the options it passes on byte for byte).
struct Option_ {
    key: String,
    value: String,
    raw: Option<String>,
}

/// The connection string without its options, and its options: a URL's
/// query (`?a=b&c=d`) or `key=value` pairs (values may be single-quoted).
fn split_options(url: &str) -> (String, Vec<Option_>) {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return match url.split_once('?') {
            Some((base, query)) => (
                base.to_owned(),
                query
                    .split('&')
                    .filter(|pair| !pair.is_empty())
                    .map(|pair| {
                        let (key, value) = url::form_urlencoded::parse(pair.as_bytes())
                            .next()
                            .map(|(k, v)| (k.into_owned(), v.into_owned()))
                            .unwrap_or_default();
                        Option_ {
                            key,
                            value,
                            raw: Some(pair.to_owned()),
                        }
                    })
                    .collect(),
            ),
            None => (url.to_owned(), Vec::new()),
        };
    }
    let mut pairs = Vec::new();
    let mut chars = url.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let key: String =
            std::iter::from_fn(|| chars.next_if(|c| *c != '=' && !c.is_whitespace())).collect();
        if key.is_empty() {
            break;
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let _ = chars.next_if_eq(&'=');
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '\'' => break,
                    c => value.push(c),
                }
            }
        } else {
            value = std::iter::from_fn(|| chars.next_if(|c| !c.is_whitespace())).collect();
        }
        pairs.push(Option_ {
            key,
            value,
            raw: None,
        });
    }
    (String::new(), pairs)
}

/// The connection string again, with `options`.
fn join_options(base: &str, options: &[Option_]) -> String {
    if !base.is_empty() {
        let query: Vec<&str> = options.iter().filter_map(|o| o.raw.as_deref()).collect();
        if query.is_empty() {
            return base.to_owned();
        }
        return format!("{base}?{}", query.join("&"));
    }
    options
        .iter()
        .map(|o| {
            format!(
                "{}='{}'",
                o.key,
                o.value.replace('\\', "\\\\").replace('\'', "\\'")
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(url: &str) -> Result<SslMode, String> {
        parse(url, "t").map(|c| c.mode).map_err(|e| e.to_string())
    }

    #[test]
    fn the_pool_size_is_read_from_either_form_and_checked() {
        let size = |url: &str| {
            parse(url, "t")
                .map(|c| c.pool_size)
                .map_err(|e| e.to_string())
        };
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
        assert_eq!(size("postgres://a@h/db"), Ok(cores));
        assert_eq!(
            size("postgres://a@h/db?pool_max_conns=3&sslmode=disable"),
            Ok(3)
        );
        assert_eq!(size("host=h user=a pool_max_conns=5"), Ok(5));
        for bad in ["0", "-1", "many", "1001"] {
            let error = size(&format!("postgres://a@h/db?pool_max_conns={bad}")).unwrap_err();
            assert!(
                error.contains(&format!("pool_max_conns `{bad}`")),
                "{error}"
            );
        }
        // The option does not reach tokio-postgres (which would refuse it).
        let connect = parse("postgres://a@h/db?pool_max_conns=3&application_name=x", "t").unwrap();
        assert_eq!(connect.config.get_application_name(), Some("x"));
    }

    #[test]
    fn modes_follow_libpq() {
        assert_eq!(mode("postgres://a@h/db"), Ok(SslMode::Prefer));
        assert_eq!(
            mode("postgres://a@h/db?sslmode=disable"),
            Ok(SslMode::Disable)
        );
        assert_eq!(mode("host=h user=a sslmode=require"), Ok(SslMode::Require));
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.pem");
        let error = mode(&format!(
            "postgres://a@h/db?sslmode=verify-full&sslrootcert={}",
            missing.display()
        ))
        .unwrap_err();
        assert!(error.contains("cannot read sslrootcert"), "{error}");
        assert!(
            mode("postgres://a@h/db?sslmode=sometimes")
                .unwrap_err()
                .contains("unknown sslmode")
        );
        assert!(
            mode("postgres://a@h/db?sslcert=c.pem")
                .unwrap_err()
                .contains("not supported")
        );
    }

    #[test]
    fn options_survive_the_round_trip() {
        let (base, options) =
            split_options("postgres://a:p%40ss@h:5/db?application_name=x%20y&sslmode=require");
        assert_eq!(base, "postgres://a:p%40ss@h:5/db");
        assert_eq!(
            (options[0].key.as_str(), options[0].value.as_str()),
            ("application_name", "x y")
        );
        let config: tokio_postgres::Config = join_options(&base, &options[..1]).parse().unwrap();
        assert_eq!(config.get_application_name(), Some("x y"));
        let (_, options) = split_options(r"host=h password='a\'b c' user=u");
        assert_eq!(
            (options[1].key.as_str(), options[1].value.as_str()),
            ("password", "a'b c")
        );
        let config: tokio_postgres::Config = join_options("", &options).parse().unwrap();
        assert_eq!(config.get_password(), Some("a'b c".as_bytes()));
        assert_eq!(config.get_user(), Some("u"));
    }
}
