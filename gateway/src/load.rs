//! Loading a config: read it, check it, and build what it describes, once. A config is valid exactly when its
//! build succeeds, so start-up and every reload run [`Loaded::build`] and serve what it returns; nothing reads a
//! secret or builds a source a second time.

use std::path::Path;

use hookline_common::config::{ConfigError, Problems};
use secrecy::SecretSlice;

use crate::{config::GatewayConfig, source::SourceTable};

/// A config and everything built from it: the sources with their secrets, and the reload token.
#[derive(Debug)]
pub struct Loaded {
    pub config: GatewayConfig,
    pub sources: SourceTable,
    /// The bearer token `POST /admin/reload` wants from callers other than loopback.
    pub reload_token: Option<SecretSlice<u8>>,
    /// The read-only bearer token `GET /admin/rejections` accepts (beside the reload token).
    pub rejections_token: Option<SecretSlice<u8>>,
}

/// Loads an admin token (`name` for the problems), at least 16 bytes.
fn admin_token(
    name: &str,
    token: Option<&hookline_common::config::SecretRef>,
    problems: &mut Problems,
) -> Option<SecretSlice<u8>> {
    match token?.load() {
        Ok(bytes) if bytes.len() >= 16 => Some(SecretSlice::from(bytes)),
        Ok(_) => {
            problems.push(format!("{name} must be at least 16 bytes"));
            None
        }
        Err(problem) => {
            problems.push(format!("{name}: {problem}"));
            None
        }
    }
}

impl Loaded {
    /// Reads the file (if any) with environment overrides, then [`Self::build`]s it.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        Self::build(GatewayConfig::read(path)?)
    }

    /// The config as read, with the settings that need nothing built checked: no secret is read and no source
    /// built (sources and secrets are checked when the gateway builds them), though a source that must still
    /// choose `type_from_header` is refused here too. What `--print-config` prints.
    pub fn read_checked(path: Option<&Path>) -> Result<GatewayConfig, ConfigError> {
        let config = GatewayConfig::read(path)?;
        let mut problems = Problems::default();
        config.check(&mut problems);
        crate::quota::check_config(&config, &mut problems);
        config.sources.iter().filter_map(crate::source::type_choice_problem).for_each(|problem| problems.push(problem));
        problems.into_result()?;
        Ok(config)
    }

    /// Checks `config` and builds its sources, loading every secret; on failure returns every problem at once.
    pub fn build(config: GatewayConfig) -> Result<Self, ConfigError> {
        let mut problems = Problems::default();
        config.check(&mut problems);
        crate::quota::check_config(&config, &mut problems);
        let reload_token = admin_token("reload_token", config.reload_token.as_ref(), &mut problems);
        let rejections_token = admin_token("rejections_token", config.rejections_token.as_ref(), &mut problems);
        let sources = SourceTable::build(&config)
            .map_err(|found| found.into_iter().for_each(|problem| problems.push(problem)))
            .ok();
        problems.into_result()?;
        let sources = sources.expect("a build without problems has its sources");
        Ok(Self { config, sources, reload_token, rejections_token })
    }
}

#[cfg(test)]
mod tests {
    use hookline_common::config;

    use super::*;

    #[test]
    fn every_problem_is_reported_at_once() {
        let config: GatewayConfig = config::parse_str(
            r#"
            [kafka]
            brokers = ""
            [[sources]]
            name = "bad name"
            scheme = "nope"
            secrets = []
            [[sources]]
            name = "gh"
            scheme = "github"
            type_from_header = true
            secrets = [{ id = "a", env = "HOOKLINE_TEST_SURELY_UNSET_VARIABLE" }]
            [[sources]]
            name = "gh"
            scheme = "github"
            secrets = [{ id = "a", env = "HOOKLINE_TEST_SURELY_UNSET_VARIABLE" }]
            "#,
            "test",
        )
        .unwrap();
        let Err(ConfigError::Invalid(problems)) = Loaded::build(config) else { panic!("expected invalid") };
        let all = problems.join("\n");
        for expected in [
            "kafka.brokers",
            "bad name",
            "unknown scheme `nope`",
            "has no secrets",
            "HOOKLINE_TEST_SURELY_UNSET_VARIABLE",
            "declared twice",
        ] {
            assert!(all.contains(expected), "{expected} not in {all}");
        }
    }

    /// `--print-config` (what `scripts/check-deploy` runs) reads no secret, yet refuses a source that has not chosen
    /// `type_from_header`, once.
    #[test]
    fn print_config_refuses_a_source_that_has_not_chosen_its_type_origin() {
        let path = std::env::temp_dir().join(format!("hookline-read-checked-{}.toml", std::process::id()));
        let source = "[kafka.record_auth]\nkeys = [{ id = \"k\", env = \"K\" }]\n[[sources]]\nname = \"gh\"\nscheme = \"github\"\nsecrets = [{ id = \"a\", env = \"UNSET\" }]\n";
        std::fs::write(&path, source).unwrap();
        let Err(ConfigError::Invalid(problems)) = Loaded::read_checked(Some(&path)) else { panic!("expected invalid") };
        assert_eq!(problems.iter().filter(|problem| problem.contains("type_from_header")).count(), 1, "{problems:?}");
        std::fs::write(&path, source.replace("secrets", "type_from_header = false\nsecrets")).unwrap();
        assert!(Loaded::read_checked(Some(&path)).is_ok(), "chosen: no secret is read");
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_short_reload_token_is_a_problem_and_a_good_one_is_loaded_once() {
        let path = std::env::temp_dir().join(format!("hookline-load-token-{}", std::process::id()));
        std::fs::write(&path, "short").unwrap();
        let source = r#"[[sources]]
            name = "internal"
            scheme = "none""#;
        let record_auth = "[kafka.record_auth]\nkeys = [{ id = \"k1\", env = \"HOOKLINE_RECORD_KEY_K1\" }]";
        let text = format!("reload_token = {{ id = \"t\", file = \"{}\" }}\n{record_auth}\n{source}", path.display());
        let config: GatewayConfig = config::parse_str(&text, "test").unwrap();
        let Err(ConfigError::Invalid(problems)) = Loaded::build(config.clone()) else { panic!("expected invalid") };
        assert!(problems.join("\n").contains("at least 16 bytes"), "{problems:?}");
        std::fs::write(&path, "a-token-of-enough-bytes").unwrap();
        let loaded = Loaded::build(config).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(loaded.reload_token.is_some());
        assert_eq!(loaded.sources.len(), 1);
    }
}
