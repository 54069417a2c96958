//! Which database schemas a build may serve beside (decision 0067): the rule
//! that lets the hosts sharing one database be upgraded one at a time.
//!
//! Every migration from 0040 on records, in the table `migration_rules`, the
//! oldest build it may run beside, as the newest migration such a build
//! carries: 0 for an *expand* migration (it only adds what older builds
//! ignore), the version of the release that stopped using what it removes
//! for a *contract* one. A host whose build lacks some applied migrations
//! serves on when each of them names a build no newer than its own.

use std::collections::BTreeMap;

/// How the database's migrations stand against a build's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fit {
    /// Exactly the migrations the build carries.
    Exact,
    /// Every migration the build carries, and newer ones it may serve beside
    /// (their versions): a rolling upgrade is under way.
    Ahead(Vec<i64>),
}

/// The `applied` versions a build does not carry (`carries` says which it does).
pub fn unknown(carries: impl Fn(i64) -> bool, applied: impl IntoIterator<Item = i64>) -> Vec<i64> {
    applied.into_iter().filter(|v| !carries(*v)).collect()
}

/// Whether a build carrying migrations up to `newest_carried` may serve
/// beside the `unknown` applied migrations it does not carry, by the rules
/// the database records (version, oldest build it runs beside).
pub fn runs_beside(newest_carried: i64, unknown: &[i64], rules: &[(i64, i64)]) -> Result<(), String> {
    let rules: BTreeMap<i64, i64> = rules.iter().copied().collect();
    for version in unknown {
        match rules.get(version) {
            Some(from) if *from <= newest_carried => {}
            Some(from) => {
                return Err(format!(
                    "the database holds migration {version}, which runs beside builds carrying migration {from} or newer; \
                     this build's newest is {newest_carried}: upgrade this host"
                ));
            }
            None => {
                return Err(format!(
                    "the database holds migration {version}, which this build does not carry and which names no older build \
                     it runs beside: upgrade this host"
                ));
            }
        }
    }
    Ok(())
}

/// How the `applied` migrations (version, checksum, succeeded) stand against
/// the `carried` ones (version, checksum), with the database's `rules`.
/// Refused: a migration left half-applied, a checksum that differs, a carried
/// migration not applied yet, or a newer one this build may not run beside.
pub fn fit(carried: &[(i64, Vec<u8>)], applied: &[(i64, Vec<u8>, bool)], rules: &[(i64, i64)]) -> Result<Fit, String> {
    if let Some((version, _, _)) = applied.iter().find(|(_, _, success)| !success) {
        return Err(format!("migration {version} is recorded as failed: the database was left half-migrated"));
    }
    let recorded: BTreeMap<i64, &[u8]> = applied.iter().map(|(v, checksum, _)| (*v, checksum.as_slice())).collect();
    let mut missing = Vec::new();
    for (version, checksum) in carried {
        match recorded.get(version) {
            None => missing.push(*version),
            Some(recorded) if recorded != checksum => {
                return Err(format!(
                    "migration {version}'s checksum differs from this build's: the schema was changed by hand or by another build"
                ));
            }
            Some(_) => {}
        }
    }
    if !missing.is_empty() {
        let recorded: Vec<i64> = recorded.keys().copied().collect();
        return Err(format!(
            "the database records migrations {recorded:?} and lacks {missing:?}, which this build has: an older build migrated it"
        ));
    }
    let unknown = unknown(|v| carried.iter().any(|(c, _)| *c == v), recorded.keys().copied());
    if unknown.is_empty() {
        return Ok(Fit::Exact);
    }
    let newest = carried.iter().map(|(v, _)| *v).max().unwrap_or(0);
    runs_beside(newest, &unknown, rules)?;
    Ok(Fit::Ahead(unknown))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn carried(versions: &[i64]) -> Vec<(i64, Vec<u8>)> {
        versions.iter().map(|v| (*v, vec![*v as u8])).collect()
    }

    fn applied(versions: &[i64]) -> Vec<(i64, Vec<u8>, bool)> {
        versions.iter().map(|v| (*v, vec![*v as u8], true)).collect()
    }

    #[test]
    fn a_build_serves_beside_newer_expand_migrations_only() {
        let build = carried(&[1, 2, 3]);
        assert_eq!(fit(&build, &applied(&[1, 2, 3]), &[]), Ok(Fit::Exact));
        // An expand migration (0) and a contract one naming this build (3).
        assert_eq!(fit(&build, &applied(&[1, 2, 3, 4, 5]), &[(4, 0), (5, 3)]), Ok(Fit::Ahead(vec![4, 5])));
        // A contract migration for builds carrying 4 or newer.
        let refused = fit(&build, &applied(&[1, 2, 3, 4]), &[(4, 4)]).unwrap_err();
        assert!(refused.contains("migration 4") && refused.contains("upgrade this host"), "{refused}");
        // A newer migration that records no rule (written before the rule).
        assert!(fit(&build, &applied(&[1, 2, 3, 4]), &[]).unwrap_err().contains("names no older build"));
    }

    #[test]
    fn a_database_behind_half_migrated_or_changed_is_refused() {
        let build = carried(&[1, 2, 3]);
        assert!(fit(&build, &applied(&[1, 2]), &[]).unwrap_err().contains("lacks [3], which this build has"));
        let mut failed = applied(&[1, 2, 3]);
        failed[2].2 = false;
        assert!(fit(&build, &failed, &[]).unwrap_err().contains("half-migrated"));
        let mut changed = applied(&[1, 2, 3]);
        changed[1].1 = vec![9];
        assert!(fit(&build, &changed, &[]).unwrap_err().contains("checksum"));
    }
}
