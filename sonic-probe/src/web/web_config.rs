//! The exporter web-config file (`--web-config FILE`): TLS and basic auth
//! for the HTTP endpoint, in the YAML format node_exporter, ebpf_exporter
//! and the other Prometheus exporters take (the exporter-toolkit's
//! `web-configuration.md`), so that operators reuse the files they have.
//!
//! Why a module of its own: reading the file, checking every field with an
//! error that names it, building the rustls server configuration and
//! checking a bcrypt password are one concern; `web/mod.rs` only asks "TLS
//! for this connection?" and "may this request in?". A loaded `WebConfig`
//! never changes; SIGHUP loads a new one and swaps it in whole, so a bad
//! file leaves the old one serving.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Arc,
};

use rustls::{
    crypto::{ring as provider, CryptoProvider},
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
    server::WebPkiClientVerifier,
    RootCertStore, ServerConfig, SupportedProtocolVersion,
};
use serde::Deserialize;

/// The file as written. Unknown keys are errors (a typo must not turn TLS
/// or authentication off silently).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileFormat {
    tls_server_config: Option<TlsFormat>,
    http_server_config: Option<HttpFormat>,
    basic_auth_users: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFormat {
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    client_auth_type: Option<String>,
    client_ca_file: Option<PathBuf>,
    client_allowed_sans: Option<Vec<String>>,
    min_version: Option<String>,
    max_version: Option<String>,
    cipher_suites: Option<Vec<String>>,
    curve_preferences: Option<Vec<String>>,
    prefer_server_cipher_suites: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpFormat {
    /// Accepted for compatibility; sonic-probe serves HTTP/1.1 (all
    /// Prometheus versions scrape it).
    #[allow(dead_code)]
    http2: Option<bool>,
    headers: Option<BTreeMap<String, String>>,
}

/// The response headers the exporter-toolkit lets a web-config set.
const SETTABLE_HEADERS: [&str; 5] = [
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "X-Frame-Options",
    "X-XSS-Protection",
    "Content-Security-Policy",
];

/// A checked web-config.
pub struct WebConfig {
    /// Where it was read from (None: no file, plain HTTP, no auth).
    pub path: Option<PathBuf>,
    tls: Option<Arc<ServerConfig>>,
    users: BTreeMap<String, String>,
    /// Checked against for unknown users, so that their answer takes as
    /// long as a known user's wrong password.
    unknown_user_hash: String,
    headers: Vec<(hyper::header::HeaderName, hyper::header::HeaderValue)>,
    /// Credentials that passed their bcrypt check, as keyed hashes (a
    /// random key per load; never the password): Prometheus sends the same
    /// ones every scrape, and a bcrypt run per scrape would cost more CPU
    /// than the scrape. Only right credentials are remembered, so a guess
    /// always pays the full check. Bounded; cleared by a reload.
    verified: std::sync::Mutex<std::collections::HashSet<u64>>,
    key: std::collections::hash_map::RandomState,
}

/// Right credentials remembered at most (users times their clients).
const MAX_VERIFIED: usize = 64;

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the hashes.
        f.debug_struct("WebConfig")
            .field("path", &self.path)
            .field("tls", &self.tls.is_some())
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl WebConfig {
    /// No file: plain HTTP, every request in.
    pub fn none() -> Self {
        WebConfig {
            path: None,
            tls: None,
            users: BTreeMap::new(),
            unknown_user_hash: String::new(),
            headers: Vec::new(),
            verified: Default::default(),
            key: Default::default(),
        }
    }

    /// Reads and checks `path`. The error is one line naming the field.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut c = Self::parse(&text, dir)?;
        c.path = Some(path.to_path_buf());
        Ok(c)
    }

    /// Checks the file's `text`; relative file names are taken from `dir`
    /// (the file's directory, as the exporter-toolkit does).
    pub fn parse(text: &str, dir: &Path) -> Result<Self, String> {
        // An empty file is a valid, empty config.
        let file: FileFormat = if text.trim().is_empty() {
            FileFormat::default()
        } else {
            serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?
        };
        let tls = file.tls_server_config.map(|t| tls_config(t, dir)).transpose()?.map(Arc::new);
        let users = file.basic_auth_users.unwrap_or_default();
        let mut max_cost = 0;
        for (user, hash) in &users {
            if user.contains(':') {
                return Err(format!("basic_auth_users.{user}: a user name cannot contain ':'"));
            }
            let parts: bcrypt::HashParts = hash.parse().map_err(|_| {
                format!(
                    "basic_auth_users.{user}: not a bcrypt hash (make one with `htpasswd -nBC 10 {user}`)"
                )
            })?;
            max_cost = max_cost.max(parts.get_cost());
        }
        let unknown_user_hash = if users.is_empty() {
            String::new()
        } else {
            bcrypt::hash_with_salt("sonic-probe: no such user", max_cost, [7; 16])
                .map_err(|e| format!("basic_auth_users: {e}"))?
                .to_string()
        };
        let mut headers = Vec::new();
        for (name, value) in file.http_server_config.and_then(|h| h.headers).unwrap_or_default() {
            let Some(allowed) = SETTABLE_HEADERS.iter().find(|h| h.eq_ignore_ascii_case(&name)) else {
                return Err(format!(
                    "http_server_config.headers.{name}: not a header a web-config may set ({})",
                    SETTABLE_HEADERS.join(", ")
                ));
            };
            let value = hyper::header::HeaderValue::from_str(&value)
                .map_err(|_| format!("http_server_config.headers.{name}: not a valid header value"))?;
            let name =
                hyper::header::HeaderName::from_bytes(allowed.as_bytes()).expect("a valid header name");
            headers.push((name, value));
        }
        Ok(WebConfig { tls, users, unknown_user_hash, headers, ..WebConfig::none() })
    }

    /// The TLS acceptor, if the file asks for TLS.
    pub fn tls(&self) -> Option<tokio_rustls::TlsAcceptor> {
        self.tls.clone().map(tokio_rustls::TlsAcceptor::from)
    }

    /// Whether requests must carry basic-auth credentials.
    pub fn needs_auth(&self) -> bool {
        !self.users.is_empty()
    }

    /// Headers to add to every response.
    pub fn headers(&self) -> &[(hyper::header::HeaderName, hyper::header::HeaderValue)] {
        &self.headers
    }

    /// Whether an `Authorization` header value lets the request in. Costs
    /// one bcrypt check whenever users are configured, for an unknown user
    /// too, unless these exact credentials passed before; call it off the
    /// event loop.
    pub fn authorized(&self, authorization: Option<&[u8]>) -> bool {
        if self.users.is_empty() {
            return true;
        }
        let (user, password) = authorization.and_then(basic_credentials).unwrap_or_default();
        let remembered = {
            use std::hash::BuildHasher;
            self.key.hash_one((&user, &password))
        };
        let mut verified = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        if verified.contains(&remembered) {
            return true;
        }
        drop(verified);
        let (known, hash) = match self.users.get(&user) {
            Some(h) => (true, h.as_str()),
            None => (false, self.unknown_user_hash.as_str()),
        };
        // Checked for an unknown user too (no short-circuit): same time.
        let matches = bcrypt::verify(password.as_bytes(), hash).unwrap_or(false);
        let ok = known && matches;
        if ok {
            verified = self.verified.lock().unwrap_or_else(|e| e.into_inner());
            if verified.len() >= MAX_VERIFIED {
                verified.clear();
            }
            verified.insert(remembered);
        }
        ok
    }

    /// A short description for the log: what the endpoint requires.
    pub fn describe(&self) -> String {
        match (self.tls.is_some(), self.users.len()) {
            (false, 0) => "plain HTTP, no authentication".into(),
            (true, 0) => "TLS, no authentication".into(),
            (tls, n) => format!(
                "{}basic auth ({n} user{})",
                if tls { "TLS, " } else { "plain HTTP (passwords in clear!), " },
                if n == 1 { "" } else { "s" }
            ),
        }
    }
}

/// `Basic base64(user:password)` -> (user, password).
fn basic_credentials(value: &[u8]) -> Option<(String, String)> {
    use base64::Engine;
    let value = std::str::from_utf8(value).ok()?;
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

fn read(field: &str, dir: &Path, file: &Path) -> Result<Vec<u8>, String> {
    let path = dir.join(file);
    std::fs::read(&path)
        .map_err(|e| format!("tls_server_config.{field}: cannot read {}: {e}", path.display()))
}

fn certificates(field: &str, pem: &[u8], path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("tls_server_config.{field}: {}: not PEM certificates ({e})", path.display()))?;
    if certs.is_empty() {
        return Err(format!("tls_server_config.{field}: {}: no certificate in it", path.display()));
    }
    Ok(certs)
}

fn tls_config(t: TlsFormat, dir: &Path) -> Result<ServerConfig, String> {
    let (Some(cert_file), Some(key_file)) = (&t.cert_file, &t.key_file) else {
        return Err("tls_server_config: needs both cert_file and key_file".into());
    };
    if t.client_allowed_sans.is_some() {
        return Err("tls_server_config.client_allowed_sans: not supported by sonic-probe; \
                    restrict clients by the CA in client_ca_file"
            .into());
    }
    // The settings first, the files after: a wrong setting is named even
    // where the files are not there yet.
    let versions = protocol_versions(t.min_version.as_deref(), t.max_version.as_deref())?;
    let mut crypto = provider::default_provider();
    if let Some(names) = &t.cipher_suites {
        crypto.cipher_suites = cipher_suites(names)?;
    }
    if let Some(names) = &t.curve_preferences {
        crypto.kx_groups = curves(names)?;
    }
    let certs = certificates("cert_file", &read("cert_file", dir, cert_file)?, cert_file)?;
    let key = PrivateKeyDer::from_pem_slice(&read("key_file", dir, key_file)?).map_err(|e| {
        format!("tls_server_config.key_file: {}: no private key in it ({e})", key_file.display())
    })?;
    let crypto = Arc::new(crypto);
    let builder = ServerConfig::builder_with_provider(crypto.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("tls_server_config: {e}"))?;

    // As the exporter-toolkit: a CA file alone means clients must present a
    // certificate it signed.
    let auth_type = match (t.client_auth_type.as_deref(), &t.client_ca_file) {
        (Some(a), _) => a,
        (None, Some(_)) => "RequireAndVerifyClientCert",
        (None, None) => "NoClientCert",
    };
    let builder = match auth_type {
        "NoClientCert" => {
            if t.client_ca_file.is_some() {
                return Err(
                    "tls_server_config.client_ca_file: given, but client_auth_type is NoClientCert".into()
                );
            }
            builder.with_no_client_auth()
        }
        "VerifyClientCertIfGiven" | "RequireAndVerifyClientCert" => {
            let Some(ca_file) = &t.client_ca_file else {
                return Err(format!("tls_server_config.client_auth_type: {auth_type} needs client_ca_file"));
            };
            let mut roots = RootCertStore::empty();
            for cert in certificates("client_ca_file", &read("client_ca_file", dir, ca_file)?, ca_file)? {
                roots.add(cert).map_err(|e| {
                    format!(
                        "tls_server_config.client_ca_file: {}: not a CA certificate ({e})",
                        ca_file.display()
                    )
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), crypto);
            let verifier = if auth_type == "VerifyClientCertIfGiven" {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier.build().map_err(|e| format!("tls_server_config.client_ca_file: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
        "RequestClientCert" | "RequireAnyClientCert" => {
            return Err(format!(
                "tls_server_config.client_auth_type: {auth_type} accepts certificates nobody verifies; \
                 use VerifyClientCertIfGiven or RequireAndVerifyClientCert with client_ca_file"
            ))
        }
        other => {
            return Err(format!(
                "tls_server_config.client_auth_type: '{other}' is not one of NoClientCert, \
                 VerifyClientCertIfGiven, RequireAndVerifyClientCert"
            ))
        }
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| {
        format!(
            "tls_server_config.key_file: {} does not go with cert_file {} ({e})",
            key_file.display(),
            cert_file.display()
        )
    })?;
    config.ignore_client_order = t.prefer_server_cipher_suites.unwrap_or(true);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn protocol_versions(
    min: Option<&str>,
    max: Option<&str>,
) -> Result<Vec<&'static SupportedProtocolVersion>, String> {
    let rank = |field: &str, v: &str| match v {
        "TLS12" => Ok(12),
        "TLS13" => Ok(13),
        "TLS10" | "TLS11" => Err(format!(
            "tls_server_config.{field}: {v} is not offered (TLS 1.0 and 1.1 are broken); use TLS12 or TLS13"
        )),
        other => Err(format!("tls_server_config.{field}: '{other}' is not TLS12 or TLS13")),
    };
    let lo = min.map(|v| rank("min_version", v)).transpose()?.unwrap_or(12);
    let hi = max.map(|v| rank("max_version", v)).transpose()?.unwrap_or(13);
    if lo > hi {
        return Err("tls_server_config: min_version is above max_version".into());
    }
    Ok([(12, &rustls::version::TLS12), (13, &rustls::version::TLS13)]
        .into_iter()
        .filter(|(r, _)| (lo..=hi).contains(r))
        .map(|(_, v)| v)
        .collect())
}

/// Go's names for the TLS 1.2 suites; TLS 1.3's suites are always on (Go
/// does not let them be chosen either).
fn cipher_suites(names: &[String]) -> Result<Vec<rustls::SupportedCipherSuite>, String> {
    let all = provider::ALL_CIPHER_SUITES;
    let mut chosen: Vec<_> = all.iter().filter(|s| s.version() == &rustls::version::TLS13).copied().collect();
    for name in names {
        let canonical =
            if name.ends_with("CHACHA20_POLY1305") { format!("{name}_SHA256") } else { name.clone() };
        let Some(suite) = all.iter().find(|s| format!("{:?}", s.suite()) == canonical) else {
            let offered: Vec<String> = all
                .iter()
                .filter(|s| s.version() == &rustls::version::TLS12)
                .map(|s| format!("{:?}", s.suite()))
                .collect();
            return Err(format!(
                "tls_server_config.cipher_suites: '{name}' is not offered; choose from {}",
                offered.join(", ")
            ));
        };
        if !chosen.contains(suite) {
            chosen.push(*suite);
        }
    }
    Ok(chosen)
}

fn curves(names: &[String]) -> Result<Vec<&'static dyn rustls::crypto::SupportedKxGroup>, String> {
    names
        .iter()
        .map(|name| match name.as_str() {
            "X25519" => Ok(provider::kx_group::X25519),
            "CurveP256" => Ok(provider::kx_group::SECP256R1),
            "CurveP384" => Ok(provider::kx_group::SECP384R1),
            other => Err(format!(
                "tls_server_config.curve_preferences: '{other}' is not offered; choose from X25519, CurveP256, CurveP384"
            )),
        })
        .collect()
}

/// The crypto provider the client side uses too.
pub fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(provider::default_provider())
}

#[cfg(test)]
mod tests {
    use super::*;

    // A cost-4 hash of "secret" (bcrypt's lowest cost keeps the tests fast).
    fn hash(password: &str) -> String {
        bcrypt::hash(password, 4).unwrap()
    }

    fn auth(user: &str, password: &str) -> Vec<u8> {
        use base64::Engine;
        format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
            .into_bytes()
    }

    #[test]
    fn empty_and_absent_mean_plain_and_open() {
        for text in ["", "\n", "basic_auth_users: {}\n"] {
            let c = WebConfig::parse(text, Path::new(".")).unwrap();
            assert!(c.tls().is_none() && !c.needs_auth() && c.authorized(None), "{text:?}");
        }
        assert!(WebConfig::none().authorized(None));
    }

    #[test]
    fn basic_auth_checks_bcrypt() {
        let c =
            WebConfig::parse(&format!("basic_auth_users:\n  alice: '{}'\n", hash("secret")), Path::new("."))
                .unwrap();
        assert!(c.needs_auth());
        assert!(c.authorized(Some(&auth("alice", "secret"))));
        // Remembered: the second time takes no bcrypt run.
        assert!(c.authorized(Some(&auth("alice", "secret"))));
        assert_eq!(c.verified.lock().unwrap().len(), 1);
        assert!(!c.authorized(Some(&auth("alice", "wrong"))));
        assert!(!c.authorized(Some(&auth("bob", "secret"))));
        assert!(!c.authorized(None));
        assert!(!c.authorized(Some(b"Bearer abc")));
        assert!(!c.authorized(Some(b"Basic !!!")));
        assert_eq!(c.verified.lock().unwrap().len(), 1, "only right credentials are remembered");
        assert!(
            c.describe().contains("plain HTTP (passwords in clear!), basic auth (1 user)"),
            "{}",
            c.describe()
        );
        assert!(!format!("{c:?}").contains("$2"), "no hash in Debug");
    }

    #[test]
    fn errors_name_the_field() {
        let cases: &[(&str, &str)] = &[
            ("basic_auth_users:\n  alice: plaintext\n", "basic_auth_users.alice: not a bcrypt hash"),
            (
                "tls_server_config:\n  cert_file: /nonexistent.crt\n  key_file: k\n",
                "tls_server_config.cert_file: cannot read /nonexistent.crt",
            ),
            ("tls_server_config:\n  cert_file: c\n", "needs both cert_file and key_file"),
            ("tls_server_confg: {}\n", "unknown field `tls_server_confg`"),
            (
                "tls_server_config:\n  cert_file: c\n  key_file: k\n  client_allowed_sans: [x]\n",
                "client_allowed_sans: not supported",
            ),
            (
                "http_server_config:\n  headers:\n    Server: x\n",
                "http_server_config.headers.Server: not a header",
            ),
            ("basic_auth_users: [1]\n", "basic_auth_users"),
        ];
        for (text, want) in cases {
            let e = WebConfig::parse(text, Path::new("/")).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn versions_suites_and_curves() {
        assert_eq!(protocol_versions(None, None).unwrap().len(), 2);
        assert_eq!(protocol_versions(Some("TLS13"), None).unwrap(), vec![&rustls::version::TLS13]);
        assert!(protocol_versions(Some("TLS10"), None).unwrap_err().contains("TLS 1.0 and 1.1"));
        assert!(protocol_versions(Some("TLS13"), Some("TLS12")).unwrap_err().contains("above"));
        let s = cipher_suites(&["TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305".into()]).unwrap();
        assert!(s
            .iter()
            .any(|s| format!("{:?}", s.suite()) == "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"));
        assert!(cipher_suites(&["TLS_RSA_WITH_RC4_128_SHA".into()]).unwrap_err().contains("not offered"));
        assert_eq!(curves(&["X25519".into(), "CurveP256".into()]).unwrap().len(), 2);
        assert!(curves(&["CurveP521".into()]).is_err());
    }

    #[test]
    fn the_shipped_example_parses() {
        // deploy/web-config.yml, with a certificate and key beside it: the
        // example is valid, and its placeholder hash is of "change-me".
        let example = include_str!("../../../deploy/web-config.yml");
        let err = WebConfig::parse(example, Path::new("/nonexistent")).unwrap_err();
        assert!(err.starts_with("tls_server_config.cert_file: cannot read /nonexistent/server.crt"), "{err}");
        let users_only = &example[example.find("basic_auth_users:").unwrap()..];
        let c = WebConfig::parse(users_only, Path::new(".")).unwrap();
        assert!(c.authorized(Some(&auth("prometheus", "change-me"))));
    }

    #[test]
    fn basic_credentials_parse() {
        assert_eq!(basic_credentials(&auth("a", "b:c")), Some(("a".into(), "b:c".into())));
        assert_eq!(basic_credentials(b"basic YTpi"), Some(("a".into(), "b".into())));
        assert_eq!(basic_credentials(b"Basic"), None);
    }
}
