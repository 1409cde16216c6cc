//! Secret environment variables: which of the caller's variables the command must not inherit.
//!
//! - Owns the default list, [`SECRET_VARIABLES`] (a plain table of name globs, each with what
//!   its value holds and why it is there), and its known false positives,
//!   [`NOT_SECRET_VARIABLES`].
//! - Entry points: [`secret_rule`] (is this name a secret, and by which entry),
//!   [`withheld`] (secret and not kept with `--keep-env`), and the matcher they share,
//!   [`glob_matches`]; [`rule_in`] does the same over any table, so a policy file can bring
//!   its own.
//! - Pure functions over names: it never reads, prints or stores a value, and never touches
//!   the process's environment (`shofer-sandbox` removes what [`withheld`] names).
//!
//! ```
//! use shofer_core::secretenv::{secret_rule, withheld};
//! assert!(secret_rule("GITHUB_TOKEN").is_some());
//! assert!(secret_rule("aws_secret_access_key").is_some()); // names compare case-insensitively
//! assert!(secret_rule("SSH_AUTH_SOCK").is_none()); // a socket path, not a secret
//! assert!(!withheld("GITHUB_TOKEN", &["GITHUB_*"])); // kept with --keep-env 'GITHUB_*'
//! ```
//!
//! # How
//! A name is secret when one glob of [`SECRET_VARIABLES`] matches it and none of
//! [`NOT_SECRET_VARIABLES`] does. Globs know one wildcard, `*` (any run of bytes, empty
//! included); everything else is literal. The default tables compare ASCII letters
//! case-insensitively (`github_token` is as secret as `GITHUB_TOKEN`), so a variable cannot
//! slip through by its spelling. `--keep-env` globs ([`withheld`]) compare exactly, as the
//! kernel and shells treat names: `--keep-env GITHUB_TOKEN` keeps that variable and not a
//! `github_token` beside it.
//!
//! Whole words (`*TOKEN*`, `*SECRET*`, `*PASSWORD*`, ...) catch the many tools' own names
//! (`NPM_TOKEN`, `CARGO_REGISTRIES_<NAME>_TOKEN`, `TWINE_PASSWORD`, `HF_TOKEN`, ...); the
//! named entries are the ones no word catches, plus the best-known ones, listed first so that
//! [`secret_rule`] names the most specific reason.
//!
//! A variable whose value is a *path* to a credential file ([`Holds::Path`]:
//! `GOOGLE_APPLICATION_CREDENTIALS`, `AWS_SHARED_CREDENTIALS_FILE`, ...) is withheld too: it is
//! how a tool finds the credential, and without it the tool falls back to its default
//! location, which the secret locations hide. The file it names may lie anywhere, so the
//! table says which entries are paths (the hidden-location set may hide what they name).
//!
//! # Caveats
//! - Names only: a secret inside an ordinary variable (`DATABASE_URL=postgres://u:pw@h`,
//!   `PIP_INDEX_URL` with credentials, a webhook URL, an `http.extraHeader` passed as
//!   `GIT_CONFIG_VALUE_<n>`) is not recognised. `DATABASE_URL` stays
//!   on purpose: builds need it (`sqlx` checks queries against it at compile time).
//! - Variables that only name a *configuration* (`KUBECONFIG`, `DOCKER_CONFIG`,
//!   `AWS_CONFIG_FILE`, `CLOUDSDK_CONFIG`, `PGPASSFILE`) pass: they change where a tool looks,
//!   and the files they usually name are hidden locations.
//! - A wide word withholds a few harmless names too (`PASSWORD_STORE_DIR`,
//!   `ACTIONS_ID_TOKEN_REQUEST_URL`); that is the safe side, and `--keep-env` brings one back.

/// What a secret variable's value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holds {
    /// The secret itself (a token, a password, a key).
    Value,
    /// The path of a file that holds one.
    Path,
}

/// One entry of a variable table: a name glob, what a matching variable's value holds, and
/// why the entry is there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VarRule {
    /// The name glob (`*` matches any run of characters; everything else is literal).
    pub glob: &'static str,
    /// What the value of a matching variable is.
    pub holds: Holds,
    /// Why the entry is there (for the docs and a future policy file's comments).
    pub why: &'static str,
}

const fn value(glob: &'static str, why: &'static str) -> VarRule {
    VarRule {
        glob,
        holds: Holds::Value,
        why,
    }
}

const fn path(glob: &'static str, why: &'static str) -> VarRule {
    VarRule {
        glob,
        holds: Holds::Path,
        why,
    }
}

/// The default secret variables: names matching one of these (case-insensitively) are not
/// passed to the command unless kept. Specific entries come first, the words last.
pub const SECRET_VARIABLES: &[VarRule] = &[
    // Cloud providers.
    value(
        "AWS_ACCESS_KEY_ID",
        "AWS: the access key's id, one half of a long-term key pair",
    ),
    value(
        "AWS_SECRET_ACCESS_KEY",
        "AWS: the secret half of the key pair",
    ),
    value(
        "AWS_SESSION_TOKEN",
        "AWS: temporary credentials' session token (AWS_SECURITY_TOKEN in old boto)",
    ),
    path(
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS: where the credentials file is (default ~/.aws/credentials)",
    ),
    path(
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS: the web-identity (EKS, OIDC) token the SDKs exchange for credentials",
    ),
    value(
        "AZURE_CLIENT_SECRET",
        "Azure: a service principal's secret (azure-identity EnvironmentCredential)",
    ),
    path(
        "AZURE_CLIENT_CERTIFICATE_PATH",
        "Azure: a service principal's certificate with its private key",
    ),
    path(
        "ARM_CLIENT_CERTIFICATE_PATH",
        "Azure through Terraform: as AZURE_CLIENT_CERTIFICATE_PATH",
    ),
    value(
        "AZURE_STORAGE_KEY",
        "Azure: a storage account key (AZURE_STORAGE_ACCOUNT_KEY matches *ACCOUNT_KEY*)",
    ),
    value(
        "AZURE_DEVOPS_EXT_PAT",
        "Azure DevOps CLI: a personal access token (also *_PAT)",
    ),
    path(
        "GOOGLE_APPLICATION_CREDENTIALS",
        "Google Cloud: Application Default Credentials' service-account key file",
    ),
    value(
        "GOOGLE_CLOUD_KEYFILE_JSON",
        "Google Cloud through Terraform: a service-account key (its JSON or its path)",
    ),
    // Package registries and forges.
    value("GITHUB_TOKEN", "GitHub: API token (Actions, gh, many tools)"),
    value("GH_TOKEN", "GitHub CLI: API token"),
    value("NPM_TOKEN", "npm: registry token (referenced from .npmrc)"),
    value(
        "NPM_CONFIG__AUTH",
        "npm: the `_auth` setting, base64 of user:password",
    ),
    value(
        "CARGO_REGISTRY_TOKEN",
        "cargo: crates.io token (CARGO_REGISTRIES_<NAME>_TOKEN for others)",
    ),
    value(
        "TWINE_PASSWORD",
        "twine (PyPI uploads): the password, usually a PyPI API token",
    ),
    value("GEM_HOST_API_KEY", "RubyGems: push key"),
    value(
        "DOCKER_AUTH_CONFIG",
        "container registries: a docker config.json's `auths` with credentials",
    ),
    // AI agents' and model providers' keys.
    value("ANTHROPIC_API_KEY", "Anthropic API key (Claude Code)"),
    value(
        "ANTHROPIC_AUTH_TOKEN",
        "Anthropic bearer token (Claude Code behind a gateway)",
    ),
    value(
        "CLAUDE_CODE_OAUTH_TOKEN",
        "Claude Code: subscription OAuth token",
    ),
    value("OPENAI_API_KEY", "OpenAI API key (Codex)"),
    value("GEMINI_API_KEY", "Gemini API key (Gemini CLI)"),
    value("GOOGLE_API_KEY", "Google API key (Gemini CLI, Google SDKs)"),
    // Password managers and databases.
    value(
        "BW_SESSION",
        "Bitwarden CLI: the key of an unlocked vault session",
    ),
    value(
        "OP_SESSION_*",
        "1Password CLI v1: session tokens, one per account",
    ),
    value(
        "MYSQL_PWD",
        "MySQL clients: the password (PGPASSWORD matches *PASSWORD*)",
    ),
    // Words: what most tools call a secret.
    value(
        "*TOKEN*",
        "tokens: GITHUB_TOKEN, GITLAB_TOKEN, NPM_TOKEN, NODE_AUTH_TOKEN, HF_TOKEN, VAULT_TOKEN, CI_JOB_TOKEN, CARGO_REGISTRIES_*_TOKEN, POETRY_PYPI_TOKEN_*, UV_PUBLISH_TOKEN, AWS_BEARER_TOKEN_BEDROCK, ...",
    ),
    value(
        "*SECRET*",
        "client and signing secrets: AWS_SECRET_ACCESS_KEY, ARM_CLIENT_SECRET, ALIBABA_CLOUD_ACCESS_KEY_SECRET, JWT_SECRET, ...",
    ),
    value(
        "*PASSWORD*",
        "passwords: TWINE_PASSWORD, PGPASSWORD, AZURE_PASSWORD, UV_PUBLISH_PASSWORD, POETRY_HTTP_BASIC_*_PASSWORD, ...",
    ),
    value("*PASSWD*", "passwords, spelled as passwd(5)"),
    value(
        "*PASSPHRASE*",
        "key passphrases: BORG_PASSPHRASE, GPG and signing-key passphrases, ...",
    ),
    value(
        "*API_KEY*",
        "API keys: OPENAI_API_KEY, MISTRAL_API_KEY, GEM_HOST_API_KEY, NUGET_API_KEY, DD_API_KEY, and a bare API_KEY",
    ),
    value("*APIKEY*", "API keys spelled as one word"),
    value(
        "*ACCESS_KEY*",
        "access key pairs: AWS_ACCESS_KEY_ID, ARM_ACCESS_KEY, MINIO_ACCESS_KEY, S3-compatible stores",
    ),
    value(
        "*ACCOUNT_KEY*",
        "Azure storage account keys and other providers' account keys",
    ),
    value(
        "*PRIVATE_KEY*",
        "private keys in a variable: SSH_PRIVATE_KEY, GPG_PRIVATE_KEY, TAURI_PRIVATE_KEY, ...",
    ),
    value(
        "*AUTHKEY*",
        "auth keys: TS_AUTHKEY (Tailscale), TAILSCALE_AUTHKEY",
    ),
    value("*AUTH_KEY*", "auth keys spelled with an underscore"),
    value(
        "*CREDENTIAL*",
        "credentials or where they are: GOOGLE_APPLICATION_CREDENTIALS, GOOGLE_CREDENTIALS, CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE, ...",
    ),
    value(
        "*CONNECTION_STRING*",
        "connection strings embed a key or password: AZURE_STORAGE_CONNECTION_STRING, ...",
    ),
    value(
        "*_PAT",
        "personal access tokens: AZURE_DEVOPS_EXT_PAT, GITLAB_PAT, GH_PAT",
    ),
];

/// Names that a word of [`SECRET_VARIABLES`] matches but that hold no secret: they pass.
pub const NOT_SECRET_VARIABLES: &[VarRule] = &[value(
    "TOKENIZERS_PARALLELISM",
    "Hugging Face tokenizers: `true`/`false`; set to silence its fork warning, which would \
     otherwise come back in every Python run's output",
)];

/// Whether `glob` matches all of `name`: `*` matches any run of bytes (empty included), every
/// other byte itself — ASCII letters in either case when `fold_case`. No other wildcard or
/// escape exists (names cannot contain `*` anyway: shells refuse it).
///
/// Linear in practice (one backtrack point, the last `*`), never recursive.
pub fn glob_matches(glob: &[u8], name: &[u8], fold_case: bool) -> bool {
    let same = |a: u8, b: u8| {
        if fold_case {
            a.eq_ignore_ascii_case(&b)
        } else {
            a == b
        }
    };
    let (mut g, mut n) = (0, 0);
    // Where the last `*` was, and how much of `name` it has taken so far.
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match glob.get(g) {
            Some(b'*') => {
                g += 1;
                star = Some((g, n));
            }
            Some(&c) if same(c, name[n]) => {
                g += 1;
                n += 1;
            }
            _ => match star {
                // The last `*` takes one more byte; retry what follows it.
                Some((after, taken)) => {
                    g = after;
                    n = taken + 1;
                    star = Some((after, taken + 1));
                }
                None => return false,
            },
        }
    }
    glob[g..].iter().all(|&c| c == b'*')
}

/// The first entry of `table` whose glob matches `name` (case-insensitively), unless an entry
/// of `exceptions` matches it: for a policy file's own tables.
pub fn rule_in<'t>(
    table: &'t [VarRule],
    exceptions: &[VarRule],
    name: impl AsRef<[u8]>,
) -> Option<&'t VarRule> {
    let name = name.as_ref();
    if exceptions
        .iter()
        .any(|r| glob_matches(r.glob.as_bytes(), name, true))
    {
        return None;
    }
    table
        .iter()
        .find(|r| glob_matches(r.glob.as_bytes(), name, true))
}

/// The default entry that makes `name` a secret variable ([`SECRET_VARIABLES`] less
/// [`NOT_SECRET_VARIABLES`]), or `None` for an ordinary variable.
pub fn secret_rule(name: impl AsRef<[u8]>) -> Option<&'static VarRule> {
    rule_in(SECRET_VARIABLES, NOT_SECRET_VARIABLES, name)
}

/// Whether the variable `name` is withheld from the command: a secret ([`secret_rule`]) that
/// no `keep` glob (`--keep-env`, compared exactly, `*` allowed) names.
pub fn withheld<K: AsRef<[u8]>>(name: impl AsRef<[u8]>, keep: &[K]) -> bool {
    let name = name.as_ref();
    secret_rule(name).is_some() && !keep.iter().any(|k| glob_matches(k.as_ref(), name, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: &[&str] = &[];

    fn secret(name: &str) -> bool {
        secret_rule(name).is_some()
    }

    #[test]
    fn glob_matches_stars_anywhere_and_literals_exactly() {
        let m = |g: &str, n: &str| glob_matches(g.as_bytes(), n.as_bytes(), false);
        assert!(m("*", ""));
        assert!(m("*", "ANY"));
        assert!(m("", ""));
        assert!(!m("", "A"));
        assert!(m("A*", "A"));
        assert!(m("*TOKEN*", "TOKEN"));
        assert!(m("*TOKEN*", "MY_TOKEN_X"));
        assert!(!m("*TOKEN*", "TOKE"));
        assert!(m("*_PAT", "GH_PAT"));
        assert!(!m("*_PAT", "GH_PATH"));
        assert!(m("A*B*C", "AxxBxxBxxC"));
        assert!(!m("A*B*C", "AxxBxxBxx"));
        assert!(m("**A**", "A"));
        assert!(!m("GITHUB_TOKEN", "github_token"));
        assert!(glob_matches(b"GITHUB_TOKEN", b"github_token", true));
        // Non-ASCII bytes are compared as they are.
        assert!(glob_matches(b"*\xc3\xa9*", b"X\xc3\xa9Y", true));
        assert!(!glob_matches(b"*\xc3\xa9*", b"X\xc3\x89Y", true));
    }

    /// The obvious recursive definition, to check the iterative matcher against.
    fn reference(g: &[u8], n: &[u8]) -> bool {
        match (g.first(), n.first()) {
            (None, _) => n.is_empty(),
            (Some(b'*'), _) => reference(&g[1..], n) || (!n.is_empty() && reference(g, &n[1..])),
            (Some(c), Some(d)) => c == d && reference(&g[1..], &n[1..]),
            (Some(_), None) => false,
        }
    }

    proptest::proptest! {
        #[test]
        fn glob_matches_agrees_with_the_recursive_definition(
            g in "[ab*]{0,8}",
            n in "[ab]{0,10}",
        ) {
            proptest::prop_assert_eq!(
                glob_matches(g.as_bytes(), n.as_bytes(), false),
                reference(g.as_bytes(), n.as_bytes())
            );
        }
    }

    #[test]
    fn secret_rule_names_the_usual_secrets() {
        for name in [
            // Cloud providers.
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_SECURITY_TOKEN",
            "AWS_SHARED_CREDENTIALS_FILE",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "AWS_BEARER_TOKEN_BEDROCK",
            "AZURE_CLIENT_SECRET",
            "AZURE_CLIENT_CERTIFICATE_PATH",
            "AZURE_CLIENT_CERTIFICATE_PASSWORD",
            "AZURE_PASSWORD",
            "AZURE_FEDERATED_TOKEN_FILE",
            "AZURE_STORAGE_KEY",
            "AZURE_STORAGE_ACCOUNT_KEY",
            "AZURE_STORAGE_CONNECTION_STRING",
            "AZURE_STORAGE_SAS_TOKEN",
            "AZURE_DEVOPS_EXT_PAT",
            "ARM_CLIENT_SECRET",
            "ARM_ACCESS_KEY",
            "ARM_CLIENT_CERTIFICATE_PATH",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "GOOGLE_CREDENTIALS",
            "GOOGLE_CLOUD_KEYFILE_JSON",
            "GOOGLE_OAUTH_ACCESS_TOKEN",
            "CLOUDSDK_AUTH_ACCESS_TOKEN_FILE",
            "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
            "DIGITALOCEAN_ACCESS_TOKEN",
            // Registries and forges.
            "NPM_TOKEN",
            "NODE_AUTH_TOKEN",
            "npm_config__auth",
            "npm_config__authToken",
            "CARGO_REGISTRY_TOKEN",
            "CARGO_REGISTRIES_MY_CORP_TOKEN",
            "GH_TOKEN",
            "GITHUB_TOKEN",
            "GH_ENTERPRISE_TOKEN",
            "GITLAB_TOKEN",
            "CI_JOB_TOKEN",
            "TWINE_PASSWORD",
            "PYPI_API_TOKEN",
            "UV_PUBLISH_TOKEN",
            "POETRY_PYPI_TOKEN_PYPI",
            "GEM_HOST_API_KEY",
            "NUGET_API_KEY",
            "DOCKER_PASSWORD",
            "DOCKER_AUTH_CONFIG",
            "HOMEBREW_GITHUB_API_TOKEN",
            // Agents and model providers.
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
            "CLAUDE_CODE_OAUTH_TOKEN",
            "OPENAI_API_KEY",
            "GEMINI_API_KEY",
            "GOOGLE_API_KEY",
            "MISTRAL_API_KEY",
            "OPENROUTER_API_KEY",
            "HF_TOKEN",
            "HUGGING_FACE_HUB_TOKEN",
            // Others.
            "API_KEY",
            "SOMEAPIKEY",
            "SSH_PRIVATE_KEY",
            "BORG_PASSPHRASE",
            "PGPASSWORD",
            "MYSQL_PWD",
            "ROOT_PASSWD",
            "VAULT_TOKEN",
            "BW_SESSION",
            "OP_SESSION_my_team",
            "TS_AUTHKEY",
            "JWT_SECRET",
        ] {
            assert!(secret(name), "{name} must be a secret");
        }
    }

    #[test]
    fn secret_rule_ignores_the_case_of_names() {
        for name in [
            "github_token",
            "Aws_Secret_Access_Key",
            "openai_api_key",
            "my_password",
        ] {
            assert!(secret(name), "{name}");
        }
    }

    #[test]
    fn secret_rule_passes_ordinary_variables() {
        for name in [
            "PATH",
            "HOME",
            "TERM",
            "LANG",
            "LC_ALL",
            "USER",
            "SHELL",
            "PWD",
            "OLDPWD",
            "TMPDIR",
            "EDITOR",
            // A socket path: the agent's keys stay in the agent (the socket itself is the
            // unix-socket gate's matter).
            "SSH_AUTH_SOCK",
            "SSH_AGENT_PID",
            "GPG_AGENT_INFO",
            "GNUPGHOME",
            // Programs that ask for a password, not passwords.
            "GIT_ASKPASS",
            "SSH_ASKPASS",
            "SSH_ASKPASS_REQUIRE",
            "SUDO_ASKPASS",
            "GIT_TERMINAL_PROMPT",
            // Who, where, which: not secrets.
            "AWS_PROFILE",
            "AWS_REGION",
            "AWS_DEFAULT_REGION",
            "AWS_CONFIG_FILE",
            "AZURE_CLIENT_ID",
            "AZURE_TENANT_ID",
            "AZURE_SUBSCRIPTION_ID",
            "GOOGLE_CLOUD_PROJECT",
            "CLOUDSDK_CONFIG",
            "KUBECONFIG",
            "DOCKER_CONFIG",
            "DOCKER_HOST",
            "TWINE_USERNAME",
            "NPM_CONFIG_REGISTRY",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "RUSTUP_HOME",
            "GIT_CONFIG_COUNT",
            "GIT_CONFIG_KEY_0",
            "GIT_CONFIG_VALUE_0",
            "GH_HOST",
            "OPENAI_BASE_URL",
            "ANTHROPIC_BASE_URL",
            "ANTHROPIC_MODEL",
            "DATABASE_URL",
            "PGPASSFILE",
            "XAUTHORITY",
            "DISPLAY",
            "DBUS_SESSION_BUS_ADDRESS",
            "PYTHONPATH",
            "VIRTUAL_ENV",
            "NODE_OPTIONS",
            "PATCH",
            "GH_PATH",
            // The known false positive of *TOKEN*: a boolean.
            "TOKENIZERS_PARALLELISM",
            "tokenizers_parallelism",
            "",
        ] {
            assert_eq!(secret_rule(name), None, "{name} must not be a secret");
        }
    }

    #[test]
    fn secret_rule_names_the_most_specific_entry() {
        let r = secret_rule("AWS_SECRET_ACCESS_KEY").unwrap();
        assert_eq!(r.glob, "AWS_SECRET_ACCESS_KEY");
        let r = secret_rule("GOOGLE_APPLICATION_CREDENTIALS").unwrap();
        assert_eq!(r.holds, Holds::Path);
        assert_eq!(secret_rule("SOME_TOKEN").unwrap().glob, "*TOKEN*");
    }

    #[test]
    fn withheld_unless_a_keep_glob_names_it_exactly() {
        assert!(withheld("GITHUB_TOKEN", NONE));
        assert!(!withheld("PATH", NONE));
        assert!(!withheld("GITHUB_TOKEN", &["GITHUB_TOKEN"]));
        assert!(withheld("GH_TOKEN", &["GITHUB_TOKEN"]));
        assert!(!withheld("NPM_TOKEN", &["*_TOKEN"]));
        assert!(withheld("OPENAI_API_KEY", &["*_TOKEN"]));
        assert!(!withheld("OPENAI_API_KEY", &["*"]));
        // Kept names compare exactly, as the kernel and shells treat names.
        assert!(withheld("github_token", &["GITHUB_TOKEN"]));
        assert!(!withheld(
            b"github_token".as_slice(),
            &[b"github_*".as_slice()]
        ));
    }

    #[test]
    fn every_entry_has_a_reason_a_plain_glob_and_no_needless_exception() {
        for r in SECRET_VARIABLES.iter().chain(NOT_SECRET_VARIABLES) {
            assert!(!r.glob.is_empty() && !r.why.is_empty(), "{r:?}");
            assert!(
                r.glob
                    .bytes()
                    .all(|b| b == b'*' || b == b'_' || b.is_ascii_alphanumeric()),
                "{r:?}"
            );
        }
        // An exception must be needed: each one is matched by a secret word.
        for r in NOT_SECRET_VARIABLES {
            assert!(rule_in(SECRET_VARIABLES, &[], r.glob).is_some(), "{r:?}");
        }
    }
}
