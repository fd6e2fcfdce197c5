//! Where a server's OAuth client registration and tokens are kept.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// What is kept for one server: the client the authorization server knows
/// us as, and the tokens it issued.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Credentials {
    /// The authorization server (its issuer) these were obtained from.
    pub issuer: String,
    /// Its token endpoint (for refreshes).
    pub token_endpoint: String,
    /// The resource the tokens are for (RFC 8707).
    pub resource: String,
    /// The client registration.
    pub client: ClientRegistration,
    /// The tokens, once authorized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Tokens>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client.client_id)
            .field("tokens", &self.tokens.as_ref().map(|_| "…"))
            .finish()
    }
}

/// A client registered with an authorization server (dynamically, through
/// a client metadata document, or configured).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ClientRegistration {
    /// The client id.
    pub client_id: String,
    /// The client secret, for confidential clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// The redirect URI registered for it (a loopback address).
    pub redirect_uri: String,
    /// How the client authenticates at the token endpoint: `none`,
    /// `client_secret_post` or `client_secret_basic`.
    pub token_endpoint_auth_method: String,
}

impl std::fmt::Debug for ClientRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientRegistration")
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "…"))
            .field("redirect_uri", &self.redirect_uri)
            .field(
                "token_endpoint_auth_method",
                &self.token_endpoint_auth_method,
            )
            .finish()
    }
}

/// Tokens issued for one server.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Tokens {
    /// The bearer token sent with every request.
    pub access_token: String,
    /// Used to get a new access token without the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// When the access token expires, in seconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// The scopes granted, space-separated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("access_token", &"…")
            .field("refresh_token", &self.refresh_token.as_ref().map(|_| "…"))
            .field("expires_at", &self.expires_at)
            .field("scope", &self.scope)
            .finish()
    }
}

/// Keeps credentials between runs, by key (the server's name and URL). The
/// default is [`FileTokenStore`]; a host with a keychain implements this.
#[async_trait]
pub trait TokenStore: Send + Sync {
    /// The credentials saved under `key`, if any.
    async fn load(&self, key: &str) -> std::io::Result<Option<Credentials>>;
    /// Saves `credentials` under `key`, replacing what was there.
    async fn save(&self, key: &str, credentials: &Credentials) -> std::io::Result<()>;
    /// Forgets `key`.
    async fn remove(&self, key: &str) -> std::io::Result<()>;

    /// Holds off other processes refreshing `key`'s tokens until the guard
    /// is dropped, so a refresh token the server rotates is spent once:
    /// the next process waits, reads the store again and finds the new
    /// tokens. The default holds nothing, which is right for a store one
    /// process uses alone (the hub refreshes one server at a time).
    async fn lock_refresh(&self, key: &str) -> std::io::Result<RefreshGuard> {
        let _ = key;
        Ok(RefreshGuard::none())
    }
}

/// Held while one process refreshes a server's tokens
/// ([`TokenStore::lock_refresh`]).
pub struct RefreshGuard(Option<Box<dyn Send + Sync>>);

impl RefreshGuard {
    /// A guard that holds nothing.
    pub fn none() -> Self {
        Self(None)
    }

    /// A guard holding `lock` until it is dropped.
    pub fn holding(lock: impl Send + Sync + 'static) -> Self {
        Self(Some(Box::new(lock)))
    }
}

impl std::fmt::Debug for RefreshGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RefreshGuard")
            .field(&self.0.is_some())
            .finish()
    }
}

/// Credentials in one JSON file, readable by the owner only (mode 0600, in
/// a directory created 0700). Every change rewrites the file atomically
/// (a new file renamed over the old) under an advisory lock, so two
/// processes sharing the file lose neither's tokens.
#[derive(Debug, Clone)]
pub struct FileTokenStore {
    path: PathBuf,
    // One writer at a time within the process (the file lock covers
    // other processes); shared by the store's clones.
    local: std::sync::Arc<Mutex<()>>,
}

impl FileTokenStore {
    /// A store in `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            local: std::sync::Arc::new(Mutex::new(())),
        }
    }

    /// The default file: `$XDG_CONFIG_HOME/kinet/mcp-oauth.json`, else
    /// `~/.config/kinet/mcp-oauth.json`; `None` without a home directory.
    pub fn default_path() -> Option<PathBuf> {
        let config = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))?;
        Some(config.join("kinet").join("mcp-oauth.json"))
    }

    /// The file this store uses.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read_all(&self) -> std::io::Result<BTreeMap<String, Credentials>> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "{} is not a credentials file ({e}); move it away to start afresh",
                        self.path.display()
                    ),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(std::io::Error::new(
                e.kind(),
                format!("cannot read {}: {e}", self.path.display()),
            )),
        }
    }

    /// The directory of the file.
    fn dir(&self) -> &Path {
        self.path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    }

    /// The lock file beside the store with this extension, held (the
    /// directory made first, private).
    fn lock(&self, extension: &str) -> std::io::Result<FileLock> {
        create_private_dir(self.dir())?;
        FileLock::acquire(&self.path.with_extension(extension))
    }

    fn change(&self, edit: impl FnOnce(&mut BTreeMap<String, Credentials>)) -> std::io::Result<()> {
        let _local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        let _lock = self.lock("lock")?;
        let dir = self.dir();
        let mut all = self.read_all()?;
        edit(&mut all);
        let text = serde_json::to_vec_pretty(&all).map_err(std::io::Error::other)?;
        let mut builder = tempfile::Builder::new();
        builder.prefix(".mcp-oauth");
        #[cfg(unix)]
        builder.permissions(private_file());
        let mut file = builder.tempfile_in(dir).map_err(|e| in_dir(e, dir))?;
        file.write_all(&text)?;
        file.as_file().sync_all()?;
        file.persist(&self.path).map_err(|e| in_dir(e.error, dir))?;
        Ok(())
    }
}

/// Runs file work off the async threads (a lock held by another process
/// must not stall the runtime).
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| std::io::Error::other(format!("the credentials file task failed: {e}")))?
}

#[async_trait]
impl TokenStore for FileTokenStore {
    async fn load(&self, key: &str) -> std::io::Result<Option<Credentials>> {
        let store = self.clone();
        let key = key.to_owned();
        blocking(move || Ok(store.read_all()?.remove(&key))).await
    }

    async fn save(&self, key: &str, credentials: &Credentials) -> std::io::Result<()> {
        let store = self.clone();
        let (key, credentials) = (key.to_owned(), credentials.clone());
        blocking(move || {
            store.change(|all| {
                all.insert(key, credentials);
            })
        })
        .await
    }

    async fn remove(&self, key: &str) -> std::io::Result<()> {
        let store = self.clone();
        let key = key.to_owned();
        blocking(move || {
            store.change(|all| {
                all.remove(&key);
            })
        })
        .await
    }

    /// One lock file beside the store for every server's refreshes (they
    /// are short and rare).
    async fn lock_refresh(&self, _key: &str) -> std::io::Result<RefreshGuard> {
        let store = self.clone();
        blocking(move || store.lock("refresh-lock").map(RefreshGuard::holding)).await
    }
}

/// Credentials in memory only (gone when the process ends).
#[derive(Debug, Default)]
pub struct MemoryTokenStore {
    all: Mutex<BTreeMap<String, Credentials>>,
}

#[async_trait]
impl TokenStore for MemoryTokenStore {
    async fn load(&self, key: &str) -> std::io::Result<Option<Credentials>> {
        Ok(self
            .all
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned())
    }

    async fn save(&self, key: &str, credentials: &Credentials) -> std::io::Result<()> {
        self.all
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_owned(), credentials.clone());
        Ok(())
    }

    async fn remove(&self, key: &str) -> std::io::Result<()> {
        self.all
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        Ok(())
    }
}

fn in_dir(error: std::io::Error, dir: &Path) -> std::io::Error {
    std::io::Error::new(
        error.kind(),
        format!("cannot write credentials in {}: {error}", dir.display()),
    )
}

#[cfg(unix)]
fn private_file() -> std::fs::Permissions {
    use std::os::unix::fs::PermissionsExt;
    std::fs::Permissions::from_mode(0o600)
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir).map_err(|e| in_dir(e, dir))
}

/// An exclusive advisory lock on a file, released on drop.
struct FileLock {
    #[cfg(unix)]
    _file: nix::fcntl::Flock<std::fs::File>,
}

impl FileLock {
    fn acquire(path: &Path) -> std::io::Result<Self> {
        let mut options = std::fs::OpenOptions::new();
        options.create(true).truncate(false).write(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let file = options.open(path).map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot lock {}: {e}", path.display()))
        })?;
        #[cfg(unix)]
        {
            let locked = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
                .map_err(|(_, errno)| {
                    std::io::Error::other(format!("cannot lock {}: {errno}", path.display()))
                })?;
            Ok(Self { _file: locked })
        }
        #[cfg(not(unix))]
        {
            drop(file);
            Ok(Self {})
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sample(token: &str) -> Credentials {
        Credentials {
            issuer: "https://auth.example".into(),
            token_endpoint: "https://auth.example/token".into(),
            resource: "https://mcp.example/mcp".into(),
            client: ClientRegistration {
                client_id: "c".into(),
                client_secret: None,
                redirect_uri: "http://127.0.0.1:1/callback".into(),
                token_endpoint_auth_method: "none".into(),
            },
            tokens: Some(Tokens {
                access_token: token.into(),
                refresh_token: Some("r".into()),
                expires_at: Some(1),
                scope: None,
            }),
        }
    }

    #[tokio::test]
    async fn the_file_is_private_and_keeps_every_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/creds.json");
        let store = FileTokenStore::new(&path);
        store.save("a", &sample("one")).await.unwrap();
        store.save("b", &sample("two")).await.unwrap();
        store.save("a", &sample("three")).await.unwrap();
        assert_eq!(store.load("a").await.unwrap(), Some(sample("three")));
        assert_eq!(store.load("b").await.unwrap(), Some(sample("two")));
        store.remove("b").await.unwrap();
        assert_eq!(store.load("b").await.unwrap(), None);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
            let dir_mode = std::fs::metadata(path.parent().unwrap())
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(dir_mode & 0o777, 0o700);
        }
        // No token or secret in a debug print.
        let mut printed = sample("secret-token");
        printed.client.client_secret = Some("secret-client".into());
        let text = format!("{printed:?} {:?} {:?}", printed.client, printed.tokens);
        assert!(!text.contains("secret-"), "{text}");
    }

    #[tokio::test]
    async fn a_damaged_file_is_reported_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("creds.json");
        std::fs::write(&path, "{not json").unwrap();
        let error = FileTokenStore::new(&path).load("a").await.unwrap_err();
        assert!(error.to_string().contains("creds.json"), "{error}");
    }

    #[test]
    fn concurrent_writers_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("creds.json");
        std::thread::scope(|scope| {
            for t in 0..4 {
                let path = path.clone();
                scope.spawn(move || {
                    // Separate stores: only the file lock serialises them.
                    let store = FileTokenStore::new(&path);
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .build()
                        .unwrap();
                    for i in 0..10 {
                        runtime
                            .block_on(store.save(&format!("{t}-{i}"), &sample("x")))
                            .unwrap();
                    }
                });
            }
        });
        let all = FileTokenStore::new(&path).read_all().unwrap();
        assert_eq!(all.len(), 40);
    }
}
