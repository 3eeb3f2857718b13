//! `infra/relay-dist.sh` with a Mac's tools: a `PATH` whose first folder holds BSD stand-ins (a
//! `stat` that refuses GNU's `-c` as BSD stat does, a `tar` that refuses GNU's `--owner` and
//! `--group` and takes bsdtar's `--uid`/`--gid`) and then links to every other program here
//! except `sha256sum`, which macOS lacks (it has `shasum -a 256`). The script packs two
//! stand-in binaries given through `FOUNDRY_DIST_PREBUILT` (no cross build), and its
//! `SHA256SUMS` must be byte for byte what GNU `sha256sum` writes, which the installer and
//! `relay update` read; each archive holds the binary alone as `relay`, mode 755, owned by
//! 0/0. `infra/tool-folders.sh`'s `venv_for` names the same folder with either tool.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The first `name` on this process's `PATH`.
fn real(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

fn script(dir: &Path, name: &str, body: &str) {
    let file = dir.join(name);
    std::fs::write(&file, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A `PATH` as on a Mac, in `root`: BSD stand-ins first, then every other program of this
/// `PATH` by a link, leaving out `sha256sum`.
fn mac_path(root: &Path) -> String {
    let (bsd, rest) = (root.join("bsd"), root.join("rest"));
    std::fs::create_dir_all(&bsd).unwrap();
    std::fs::create_dir_all(&rest).unwrap();
    let stat = real("stat").unwrap().display().to_string();
    script(
        &bsd,
        "stat",
        &format!(
            "if [ \"$1\" = -f ] && [ \"$2\" = %z ]; then shift 2; exec {stat} -c %s \"$@\"; fi\n\
             echo \"stat: illegal option -- ${{1#-}}\" >&2\n\
             echo 'usage: stat [-FLnq] [-f format | -l | -r | -s | -x] [-t timefmt] [file ...]' >&2\n\
             exit 1"
        ),
    );
    let tar = real("tar").unwrap().display().to_string();
    script(
        &bsd,
        "tar",
        &format!(
            "for a in \"$@\"; do case $a in\n\
             --owner*|--group*) echo \"tar: Option $a is not supported\" >&2; echo 'Usage: tar -cf <archive-filename> [filenames...]' >&2; exit 1 ;;\n\
             --version) echo 'bsdtar 3.5.3 - libarchive 3.5.3 zlib/1.2.12 liblzma/5.0.5 bzip2/1.0.8'; exit 0 ;;\n\
             esac; done\n\
             n=$#\n\
             while [ $n -gt 0 ]; do a=$1; shift; n=$((n - 1)); case $a in\n\
             --uid) set -- \"$@\" \"--owner=$1\"; shift; n=$((n - 1)) ;;\n\
             --gid) set -- \"$@\" \"--group=$1\"; shift; n=$((n - 1)) ;;\n\
             --uid=*) set -- \"$@\" \"--owner=${{a#--uid=}}\" ;;\n\
             --gid=*) set -- \"$@\" \"--group=${{a#--gid=}}\" ;;\n\
             *) set -- \"$@\" \"$a\" ;;\n\
             esac; done\n\
             exec {tar} \"$@\""
        ),
    );
    if real("shasum").is_none() {
        // Debian's perl ships the real one (macOS's is the same script); without it, a stand-in.
        let sha256sum = real("sha256sum").unwrap().display().to_string();
        script(&bsd, "shasum", &format!("[ \"$1 $2\" = '-a 256' ] || exit 2\nshift 2\nexec {sha256sum} \"$@\""));
    }
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap()) {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let link = rest.join(&name);
            if name == "sha256sum" || bsd.join(&name).exists() || link.symlink_metadata().is_ok() {
                continue;
            }
            symlink(entry.path(), link).unwrap();
        }
    }
    format!("{}:{}", bsd.display(), rest.display())
}

#[test]
fn relay_dist_packs_and_sums_with_bsd_tools_and_no_sha256sum() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let root = std::env::temp_dir().join(format!("relay-dist-portable-{}", uuid::Uuid::new_v4()));
    let path = mac_path(&root);
    let sh = |cmd: &str| Command::new("sh").arg("-c").arg(cmd).env("PATH", &path).output().unwrap();
    assert!(!sh("command -v sha256sum").status.success(), "sha256sum is still on the Mac's PATH");
    let refused = sh("stat -c %s /dev/null");
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("stat: illegal option -- c"));

    let targets = ["x86_64-unknown-linux-musl", "aarch64-unknown-linux-musl"];
    let prebuilt = root.join("prebuilt");
    for (i, t) in targets.iter().enumerate() {
        std::fs::create_dir_all(prebuilt.join(t).join("release")).unwrap();
        std::fs::write(prebuilt.join(t).join("release/relay"), format!("#!/bin/sh\necho stand-in {i}\n")).unwrap();
    }
    let out = root.join("dist");
    let run = Command::new(repo.join("infra/relay-dist.sh"))
        .args(targets)
        .env("PATH", &path)
        .env("FOUNDRY_DIST_PREBUILT", &prebuilt)
        .env("FOUNDRY_DIST_DIR", &out)
        .env("FOUNDRY_CACHE_DIR", root.join("cache"))
        .output()
        .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "{said}");

    let version = env!("CARGO_PKG_VERSION");
    let mut names: Vec<String> = targets.iter().map(|t| format!("relay-{version}-{t}.tar.gz")).collect();
    names.sort();
    let sums = std::fs::read_to_string(out.join("SHA256SUMS")).unwrap();
    let expected: String = names.iter().map(|n| format!("{}  {n}\n", foundry_tests::sha256_of(&out.join(n)))).collect();
    assert_eq!(sums, expected, "{said}");
    // Byte for byte what GNU sha256sum writes (the format the installer's awk and the relay read).
    let gnu = Command::new(real("sha256sum").unwrap()).args(&names).current_dir(&out).output().unwrap();
    assert_eq!(gnu.stdout, sums.as_bytes());
    for (i, t) in targets.iter().enumerate() {
        let published = relay::machine::update::published(&sums, t).unwrap();
        assert_eq!(published.archive, format!("relay-{version}-{t}.tar.gz"));
        let archive = out.join(&published.archive);
        let size = std::fs::metadata(&archive).unwrap().len();
        assert!(said.contains(&format!("packed {} ({size} bytes)", archive.display())), "{said}");
        let listing =
            Command::new(real("tar").unwrap()).arg("--numeric-owner").arg("-tvzf").arg(&archive).output().unwrap();
        let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
        assert_eq!(listing.lines().count(), 1, "{listing}");
        assert!(listing.starts_with("-rwxr-xr-x 0/0 ") && listing.trim_end().ends_with(" relay"), "{listing}");
        let content = Command::new(real("tar").unwrap()).arg("-xOzf").arg(&archive).arg("relay").output().unwrap();
        assert_eq!(content.stdout, format!("#!/bin/sh\necho stand-in {i}\n").as_bytes());
    }

    // The pinned tools' folders are the same with shasum as with sha256sum.
    let python = real("python3").unwrap();
    let venv_for = |path: &str| {
        let out = Command::new("bash")
            .arg("-c")
            .arg(". infra/tool-folders.sh && venv_for dist infra/requirements-dist.txt")
            .current_dir(&repo)
            .env("PATH", path)
            .env("FOUNDRY_PYTHON", &python)
            .env("FOUNDRY_CACHE_DIR", "/cache")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let on_mac = venv_for(&path);
    let key = on_mac.trim_end().strip_prefix("/cache/dist-").unwrap();
    assert!(key.len() == 16 && key.bytes().all(|b| b.is_ascii_hexdigit()), "{on_mac}");
    assert_eq!(on_mac, venv_for(&std::env::var("PATH").unwrap()));
    std::fs::remove_dir_all(&root).unwrap();
}
