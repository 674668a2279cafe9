//! Certificates and web-config files for the TLS and basic-auth tests, made
//! with the openssl command line as an operator would make them: a CA, a
//! server certificate for 127.0.0.1 and localhost, a client certificate
//! signed by the CA, and one signed by a different ("rogue") CA.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

/// The files of a test PKI in one directory.
pub struct Pki {
    pub dir: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let o = Command::new("openssl").current_dir(dir).args(args).output().expect("run openssl");
    assert!(o.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

fn ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
        ],
    );
}

fn leaf(dir: &Path, name: &str, ca: &str, ext: &str) {
    std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            &format!("{name}.crt"),
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
}

impl Pki {
    /// Makes ca, server, client (signed by ca) and rogue-client (signed by
    /// rogue-ca) in `dir`.
    pub fn new(dir: &Path) -> Pki {
        std::fs::create_dir_all(dir).unwrap();
        ca(dir, "ca");
        ca(dir, "rogue-ca");
        leaf(dir, "server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n");
        leaf(dir, "client", "ca", "extendedKeyUsage=clientAuth\n");
        leaf(dir, "rogue-client", "rogue-ca", "extendedKeyUsage=clientAuth\n");
        Pki { dir: dir.to_path_buf() }
    }

    /// Makes another server certificate (for 127.0.0.1 and localhost) named
    /// `name`, signed by the CA `ca` ("ca" or "rogue-ca").
    pub fn server_cert(&self, name: &str, ca: &str) {
        leaf(&self.dir, name, ca, "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n");
    }

    pub fn path(&self, file: &str) -> String {
        self.dir.join(file).to_str().unwrap().to_string()
    }

    /// Writes a web-config named `name` and returns its path.
    pub fn web_config(&self, name: &str, text: &str) -> String {
        let p = self.dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    }
}

/// A bcrypt hash of `password` at `cost` (10 is what htpasswd -B uses).
pub fn bcrypt_hash(password: &str, cost: u32) -> String {
    bcrypt::hash(password, cost).unwrap()
}
