//! What the browser tests share: the chromium binary and the directory of their playwright scripts.

use std::path::PathBuf;

/// The browser binary: `$CHROMIUM`, or `chromium` on the PATH (scripts/test installs Debian's package).
pub fn chromium() -> PathBuf {
    if let Some(path) = std::env::var_os("CHROMIUM") {
        return PathBuf::from(path);
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join("chromium"))
        .find(|candidate| candidate.is_file())
        .expect("chromium not found: tests/browser/install (run by scripts/test) installs Debian's chromium")
}

/// `tests/browser`, once playwright-core is installed there (panics with how to install it otherwise).
pub fn scripts_dir() -> PathBuf {
    let browser_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("browser");
    assert!(
        browser_dir.join("node_modules/playwright-core").is_dir(),
        "playwright-core is not installed: run tests/browser/install (scripts/test does)"
    );
    browser_dir
}
