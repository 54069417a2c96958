//! How a list is paged: the defaults and bounds of `limit`, `offset` and
//! `page` for every list the service answers, applied here, once.
//! And how a job walks a store's rows by a key, a page at a time ([`walk`]).
//!
//! A `limit` above a list's largest page is not refused: the page holds
//! the most it can, and the answer's `limit` says the size used (the
//! reference interface sets no maximum). A `limit` below 1, a negative
//! `offset` and a `page` below 1 are mistakes (400 `INVALID_VALUE`).

use std::future::Future;

use crate::{AppError, AppResult};

/// A list's page sizes: what an absent `limit` means and the largest page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    pub default: i64,
    pub max: i64,
}

/// GET /v1/dd/list: 50 by default, at most 200.
pub const DECLARATIONS: Sizes = Sizes { default: 50, max: 200 };
/// GET /v1/tsl/tools, /v1/tsl/purchases and /v1/tsl/runs: 20 by default, at most 100.
pub const MARKET: Sizes = Sizes { default: 20, max: 100 };
/// GET /v1/dur/transactions and /v1/dur/tsl: 50 by default, at most 200.
pub const USAGE: Sizes = Sizes { default: 50, max: 200 };

/// The farthest `offset` a list reads from, and the farthest `page`.
pub const OFFSET_MAX: i64 = i32::MAX as i64;
pub const PAGE_MAX: i64 = 1_000_000;

/// A page as asked, bounded: how many and from where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub limit: i64,
    pub offset: i64,
}

impl Window {
    /// The page number this window starts (for lists paged by `page`).
    pub fn page(&self) -> i64 {
        self.offset / self.limit + 1
    }

    /// The page this window read: `items`, of `total` in all.
    pub fn holding<T>(self, items: Vec<T>, total: i64) -> Page<T> {
        Page { items, total, limit: self.limit, offset: self.offset }
    }
}

/// One page of a list: its items, how many the whole list holds, and the
/// window used (so the answer says the page size it used).
#[derive(Clone, Debug)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub total: i64,
    pub limit: i64,
    pub offset: i64,
}

impl<T> Page<T> {
    /// The page number it is (for lists paged by `page`, from 1).
    pub fn page(&self) -> i64 {
        Window { limit: self.limit, offset: self.offset }.page()
    }
}

/// The page size used for `asked`: the default when absent, the largest
/// page when above it.
pub fn limit(sizes: Sizes, asked: Option<i64>) -> AppResult<i64> {
    match asked {
        None => Ok(sizes.default),
        Some(n) if n < 1 => Err(AppError::invalid("INVALID_VALUE", format!("limit must be 1 or more; got {n}"))),
        Some(n) => Ok(n.min(sizes.max)),
    }
}

/// A window read by `limit` and `offset`.
pub fn by_offset(sizes: Sizes, limit: Option<i64>, offset: Option<i64>) -> AppResult<Window> {
    let limit = self::limit(sizes, limit)?;
    let offset = match offset {
        None => 0,
        Some(n) if (0..=OFFSET_MAX).contains(&n) => n,
        Some(n) => return Err(AppError::invalid("INVALID_VALUE", format!("offset must be from 0 to {OFFSET_MAX}; got {n}"))),
    };
    Ok(Window { limit, offset })
}

/// A window read by `limit` and `page` (from 1).
pub fn by_page(sizes: Sizes, limit: Option<i64>, page: Option<i64>) -> AppResult<Window> {
    let limit = self::limit(sizes, limit)?;
    let page = match page {
        None => 1,
        Some(n) if (1..=PAGE_MAX).contains(&n) => n,
        Some(n) => return Err(AppError::invalid("INVALID_VALUE", format!("page must be from 1 to {PAGE_MAX}; got {n}"))),
    };
    Ok(Window { limit, offset: (page - 1) * limit })
}

/// A walk through a store's rows in the order of their key, a page at a
/// time, from where the last walk stopped (`walked`; `start` for a first
/// one), `pages` pages at most: `page` reads up to `page_size` rows after a
/// key, `act` acts on one row and says whether it did anything. Returns how
/// many rows it acted on and whether the walk has further to go; `walked`
/// keeps the last key read. The jobs that walk by a deadline use it.
pub async fn walk<K: Copy, R: Copy, Read: Future<Output = AppResult<Vec<R>>>, Act: Future<Output = AppResult<bool>>>(
    walked: &mut Option<K>,
    start: K,
    pages: usize,
    page_size: i64,
    key: impl Fn(R) -> K,
    mut page: impl FnMut(K, i64) -> Read,
    mut act: impl FnMut(R) -> Act,
) -> AppResult<(usize, bool)> {
    let mut after = walked.unwrap_or(start);
    let mut acted = 0;
    for _ in 0..pages {
        let rows = page(after, page_size).await?;
        for &row in &rows {
            if act(row).await? {
                acted += 1;
            }
        }
        if let Some(last) = rows.last() {
            after = key(*last);
        }
        *walked = Some(after);
        if (rows.len() as i64) < page_size {
            return Ok((acted, false));
        }
    }
    Ok((acted, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(result: AppResult<Window>) -> String {
        result.expect_err("refused").code().to_string()
    }

    #[test]
    fn a_limit_past_the_largest_page_is_the_largest_page() {
        assert_eq!(by_offset(DECLARATIONS, None, None).unwrap(), Window { limit: 50, offset: 0 });
        assert_eq!(by_offset(DECLARATIONS, Some(1_000), Some(7)).unwrap(), Window { limit: 200, offset: 7 });
        assert_eq!(by_offset(MARKET, Some(i64::MAX), None).unwrap().limit, 100);
        assert_eq!(by_page(USAGE, Some(201), Some(3)).unwrap(), Window { limit: 200, offset: 400 });
        assert_eq!(by_page(USAGE, Some(201), Some(3)).unwrap().page(), 3);
    }

    #[test]
    fn a_page_that_cannot_be_is_refused() {
        assert_eq!(code(by_offset(DECLARATIONS, Some(0), None)), "INVALID_VALUE");
        assert_eq!(code(by_offset(DECLARATIONS, Some(-5), None)), "INVALID_VALUE");
        assert_eq!(code(by_offset(DECLARATIONS, None, Some(-1))), "INVALID_VALUE");
        assert_eq!(code(by_offset(DECLARATIONS, None, Some(OFFSET_MAX + 1))), "INVALID_VALUE");
        assert_eq!(code(by_page(MARKET, None, Some(0))), "INVALID_VALUE");
        assert_eq!(code(by_page(MARKET, None, Some(PAGE_MAX + 1))), "INVALID_VALUE");
        // The largest page number times the largest page stays far from overflow.
        assert_eq!(by_page(USAGE, Some(i64::MAX), Some(PAGE_MAX)).unwrap().offset, (PAGE_MAX - 1) * 200);
    }
}
