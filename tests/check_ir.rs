//! The checked IR of every shipped pack, snapshotted: a change in what a
//! pack means shows up in review.

use intentplane::check::check_path;

#[test]
fn shipped_packs_check_clean_and_their_ir_is_stable() {
    insta::with_settings!({
        snapshot_path => "../snapshots/ir",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::glob!("../packs", "*/pack.ipc", |path| {
            let checked = check_path(path);
            assert!(
                checked.diagnostics.is_empty(),
                "{}: {:?}",
                path.display(),
                checked.diagnostics
            );
            let mut pack = checked.pack.expect("a pack");
            pack.file = format!("{}/pack.ipc", pack.name);
            insta::assert_json_snapshot!(pack);
        });
    });
}

#[test]
fn critical_params_always_have_sources_in_the_ir() {
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/packs")).unwrap() {
        let path = entry.unwrap().path();
        let pack = check_path(&path).pack.expect("shipped packs check");
        for a in &pack.actions {
            for p in &a.params {
                assert!(
                    !p.critical || !p.sources.is_empty(),
                    "{}.{}",
                    a.name,
                    p.name
                );
            }
            assert!(!a.scope.is_empty());
        }
    }
}
