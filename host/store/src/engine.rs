//! What the two engines share and where they differ.
//!
//! Every store method is written once, as ordinary code, against [`Exec`]: a
//! [`Query`] is SQL plus typed values, run on the pool or in a write
//! transaction, and rows are read by column name through [`Row`]. The one
//! implementation of those traits is generic over sqlx's `Database` and holds
//! every sqlx bound in one place; what really differs per engine (how a write
//! transaction starts, row locks, connection set-up and migrations) is the
//! [`Dialect`] and the two constructors at the bottom of this file.

use std::borrow::Cow;
use std::marker::PhantomData;
use std::ops::DerefMut;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration as StdDuration;
use std::time::Instant;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{ColumnIndex, Decode, Encode, Executor, Pool, Postgres, Sqlite, Type};
use uuid::Uuid;

use crate::metrics::{PoolState, StoreMetrics};
use crate::{Classified, Result, StoreError};

/// One value bound to a query parameter.
#[derive(Clone, Debug)]
pub enum Value<'q> {
    Int(Option<i64>),
    Int4(Option<i32>),
    Bool(Option<bool>),
    Text(Option<Cow<'q, str>>),
    Bytes(Option<Cow<'q, [u8]>>),
    Uuid(Option<Uuid>),
    Time(Option<DateTime<Utc>>),
    /// A column of values, one parameter (PostgreSQL only).
    Array(Box<Array<'q>>),
}

/// A column of values of one kind, bound as one array parameter: a batch
/// statement names each column once (`unnest($1::uuid[], …)`), so its text,
/// and the plan PostgreSQL keeps for it, do not depend on its number of rows.
/// SQLite has no arrays: a query holding one fails there.
#[derive(Clone, Debug)]
pub enum Array<'q> {
    Int(Vec<Option<i64>>),
    Int4(Vec<Option<i32>>),
    Bool(Vec<Option<bool>>),
    Text(Vec<Option<Cow<'q, str>>>),
    Bytes(Vec<Option<Cow<'q, [u8]>>>),
    Uuid(Vec<Option<Uuid>>),
    Time(Vec<Option<DateTime<Utc>>>),
}

impl<'q> Array<'q> {
    /// The column holding `values`, which must all be of one kind (typed
    /// NULLs included); `None` if there are none or they are of several.
    pub fn of(values: impl IntoIterator<Item = Value<'q>>) -> Option<Array<'q>> {
        let mut values = values.into_iter();
        let first = values.next()?;
        macro_rules! column {
            ($($variant:ident),*) => {
                match first {
                    $(Value::$variant(v) => {
                        let mut all = vec![v];
                        for value in values {
                            let Value::$variant(v) = value else { return None };
                            all.push(v);
                        }
                        Array::$variant(all)
                    })*
                    Value::Array(_) => return None,
                }
            };
        }
        Some(column!(Int, Int4, Bool, Text, Bytes, Uuid, Time))
    }

    /// The error of an engine with no arrays (SQLite).
    pub(crate) fn unsupported(&self) -> StoreError {
        StoreError::Unsupported(format!("SQLite has no {} parameters", self.sql_type()))
    }

    /// PostgreSQL's name of the array's type.
    pub fn sql_type(&self) -> &'static str {
        match self {
            Array::Int(_) => "int8[]",
            Array::Int4(_) => "int4[]",
            Array::Bool(_) => "bool[]",
            Array::Text(_) => "text[]",
            Array::Bytes(_) => "bytea[]",
            Array::Uuid(_) => "uuid[]",
            Array::Time(_) => "timestamptz[]",
        }
    }
}

/// A Rust value that can be bound to a parameter.
pub trait Bind<'q> {
    fn value(self) -> Value<'q>;
    /// The typed NULL of this kind of value.
    fn null() -> Value<'q>;
}

macro_rules! bind {
    ($($t:ty => $variant:ident($conv:expr)),* $(,)?) => {$(
        impl<'q> Bind<'q> for $t {
            fn value(self) -> Value<'q> {
                Value::$variant(Some($conv(self)))
            }
            fn null() -> Value<'q> {
                Value::$variant(None)
            }
        }
    )*};
}

bind! {
    i64 => Int(|v| v),
    i32 => Int4(|v| v),
    bool => Bool(|v| v),
    Uuid => Uuid(|v| v),
    DateTime<Utc> => Time(|v| v),
    &'q Uuid => Uuid(|v: &'q Uuid| *v),
    &'q str => Text(Cow::Borrowed),
    &'q String => Text(|v: &'q String| Cow::Borrowed(v.as_str())),
    String => Text(Cow::Owned),
    &'q [u8] => Bytes(Cow::Borrowed),
    &'q [u8; 32] => Bytes(|v: &'q [u8; 32]| Cow::Borrowed(&v[..])),
    Vec<u8> => Bytes(Cow::Owned),
}

impl<'q, T: Bind<'q>> Bind<'q> for Option<T> {
    fn value(self) -> Value<'q> {
        match self {
            Some(v) => v.value(),
            None => T::null(),
        }
    }
    fn null() -> Value<'q> {
        T::null()
    }
}

/// SQL and the values of its `$n` parameters (both engines accept `$n`).
#[derive(Clone, Debug)]
pub struct Query<'q> {
    sql: Cow<'static, str>,
    args: Vec<Value<'q>>,
    /// The statement's label in the store's metrics, where its text alone
    /// would not say it ([`Query::labelled`]).
    label: Option<(&'static str, &'static str)>,
}

/// Starts a query.
pub fn sql<'q>(text: impl Into<Cow<'static, str>>) -> Query<'q> {
    Query { sql: text.into(), args: Vec::new(), label: None }
}

impl<'q> Query<'q> {
    /// The SQL text and the values of its parameters.
    pub(crate) fn into_parts(self) -> (Cow<'static, str>, Vec<Value<'q>>) {
        (self.sql, self.args)
    }

    /// Counted in the store's metrics as `operation` on `table` (a statement
    /// whose final part only reads what its writes returned).
    pub(crate) fn labelled(mut self, operation: &'static str, table: &'static str) -> Self {
        self.label = Some((operation, table));
        self
    }

    /// Its label in the store's metrics: the one it was given, else
    /// [`crate::metrics::classify`]'s.
    pub(crate) fn metrics_label(&self) -> (&'static str, String) {
        match self.label {
            Some((operation, table)) => (operation, table.to_string()),
            None => crate::metrics::classify(&self.sql),
        }
    }

    /// Binds the next parameter.
    pub fn bind(mut self, value: impl Bind<'q>) -> Self {
        self.args.push(value.value());
        self
    }

    /// Appends SQL text.
    pub fn push(&mut self, text: &str) -> &mut Self {
        self.sql.to_mut().push_str(text);
        self
    }

    /// Appends the next parameter's placeholder and binds a value made already.
    pub fn push_value(&mut self, value: Value<'q>) -> &mut Self {
        self.args.push(value);
        let placeholder = format!("${}", self.args.len());
        self.sql.to_mut().push_str(&placeholder);
        self
    }

    /// Appends the next parameter's placeholder and binds it.
    pub fn push_bind(&mut self, value: impl Bind<'q>) -> &mut Self {
        self.args.push(value.value());
        let placeholder = format!("${}", self.args.len());
        self.sql.to_mut().push_str(&placeholder);
        self
    }

    /// Appends the next parameter's placeholder, cast to the array's type,
    /// and binds the array.
    pub fn push_array(&mut self, array: Array<'q>) -> &mut Self {
        let cast = array.sql_type();
        self.push_value(Value::Array(Box::new(array))).push("::").push(cast)
    }

    /// Appends `unnest($1::t[], $2::t[], …) as alias (c1, c2, …)`: the rows
    /// turned into columns, each one array parameter, so the text is the
    /// same whatever the number of rows. `None`, with nothing appended, if
    /// there are no rows or they differ in their columns or kinds.
    pub fn push_unnest(&mut self, alias: &str, rows: Vec<Vec<(&'static str, Value<'q>)>>) -> Option<&mut Self> {
        let names: Vec<&'static str> = rows.first()?.iter().map(|(name, _)| *name).collect();
        let mut columns: Vec<Vec<Value<'q>>> = names.iter().map(|_| Vec::with_capacity(rows.len())).collect();
        for row in rows {
            if row.len() != names.len() {
                return None;
            }
            for ((column, (name, value)), expected) in columns.iter_mut().zip(row).zip(&names) {
                if name != *expected {
                    return None;
                }
                column.push(value);
            }
        }
        let arrays = columns.into_iter().map(Array::of).collect::<Option<Vec<_>>>()?;
        self.push("unnest(");
        for (n, array) in arrays.into_iter().enumerate() {
            if n > 0 {
                self.push(", ");
            }
            self.push_array(array);
        }
        Some(self.push(") as ").push(alias).push(" (").push(&names.join(", ")).push(")"))
    }

    /// Appends `column in ($a, $b, …)` over `ids` (`in (null)`, matching
    /// nothing, when there are none).
    pub fn push_in(&mut self, column: &str, ids: &[Uuid]) -> &mut Self {
        self.push(column).push(" in (");
        if ids.is_empty() {
            self.push("null");
        }
        for (i, id) in ids.iter().enumerate() {
            if i > 0 {
                self.push(", ");
            }
            self.push_bind(*id);
        }
        self.push(")")
    }

    /// Binds the next parameter and returns its placeholder, for SQL that
    /// names it once or more (both engines read `$n` as the same value).
    pub fn placeholder(&mut self, value: impl Bind<'q>) -> String {
        self.args.push(value.value());
        format!("${}", self.args.len())
    }

    /// `insert into TABLE (c1, c2, …) values ($1, $2, …)`, each column named
    /// beside its value.
    pub fn insert(table: &str, columns: Vec<(&'static str, Value<'q>)>) -> Query<'q> {
        let names: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
        let placeholders: Vec<String> = (1..=columns.len()).map(|i| format!("${i}")).collect();
        Query {
            sql: format!("insert into {table} ({}) values ({})", names.join(", "), placeholders.join(", ")).into(),
            args: columns.into_iter().map(|(_, v)| v).collect(),
            label: None,
        }
    }
}

/// Which column of a row to read.
#[derive(Clone, Copy, Debug)]
pub enum Col<'a> {
    Name(&'a str),
    Index(usize),
}

impl std::fmt::Display for Col<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Col::Name(name) => f.write_str(name),
            Col::Index(i) => write!(f, "column {i}"),
        }
    }
}

/// A result row, read by column.
pub trait Row: Send + Sync + 'static {
    fn read_i64(&self, col: Col<'_>) -> Result<Option<i64>>;
    fn read_i32(&self, col: Col<'_>) -> Result<Option<i32>>;
    fn read_bool(&self, col: Col<'_>) -> Result<Option<bool>>;
    fn read_text(&self, col: Col<'_>) -> Result<Option<String>>;
    fn read_bytes(&self, col: Col<'_>) -> Result<Option<Vec<u8>>>;
    fn read_uuid(&self, col: Col<'_>) -> Result<Option<Uuid>>;
    fn read_time(&self, col: Col<'_>) -> Result<Option<DateTime<Utc>>>;
    /// Whether the row has a column of this name.
    fn has_column(&self, name: &str) -> bool;

    /// The named column as `T` (an `Option` where the column may be NULL).
    fn get<T: Column>(&self, name: &str) -> Result<T>
    where
        Self: Sized,
    {
        T::read(self, Col::Name(name))
    }

    /// The named column as a value of a closed vocabulary; a name the
    /// vocabulary does not know is reported as corrupt, not passed on.
    fn named<E: anchor_domain::WireEnum>(&self, name: &str) -> Result<E>
    where
        Self: Sized,
    {
        let text: String = self.get(name)?;
        E::parse(&text).ok_or_else(|| StoreError::Corrupt(format!("{name} = {text:?} is not a {}", E::TYPE_NAME)))
    }

    /// [`Row::named`] of a column that may be NULL.
    fn opt_named<E: anchor_domain::WireEnum>(&self, name: &str) -> Result<Option<E>>
    where
        Self: Sized,
    {
        let text: Option<String> = self.get(name)?;
        text.map(|t| E::parse(&t).ok_or_else(|| StoreError::Corrupt(format!("{name} = {t:?} is not a {}", E::TYPE_NAME)))).transpose()
    }
}

/// A type a column can be read as; `Option<T>` reads NULL as `None`.
pub trait Column: Sized + Send {
    fn read<R: Row>(row: &R, col: Col<'_>) -> Result<Self>;
}

/// A non-NULL column type.
pub trait Scalar: Sized + Send {
    fn read_opt<R: Row>(row: &R, col: Col<'_>) -> Result<Option<Self>>;
}

macro_rules! scalar {
    ($($t:ty => $read:ident),* $(,)?) => {$(
        impl Scalar for $t {
            fn read_opt<R: Row>(row: &R, col: Col<'_>) -> Result<Option<Self>> {
                row.$read(col)
            }
        }
    )*};
}

scalar! {
    i64 => read_i64,
    i32 => read_i32,
    bool => read_bool,
    String => read_text,
    Vec<u8> => read_bytes,
    Uuid => read_uuid,
    DateTime<Utc> => read_time,
}

impl<T: Scalar> Column for T {
    fn read<R: Row>(row: &R, col: Col<'_>) -> Result<Self> {
        T::read_opt(row, col)?.ok_or_else(|| StoreError::Corrupt(format!("{col} is NULL")))
    }
}

impl<T: Scalar> Column for Option<T> {
    fn read<R: Row>(row: &R, col: Col<'_>) -> Result<Self> {
        T::read_opt(row, col)
    }
}

/// Runs queries: the pool (each statement on its own) or a transaction.
#[async_trait]
pub trait Exec: Send {
    type Row: Row;

    /// Rows affected.
    async fn execute(&mut self, query: Query<'_>) -> Result<u64>;
    async fn fetch_all(&mut self, query: Query<'_>) -> Result<Vec<Self::Row>>;
    async fn fetch_optional(&mut self, query: Query<'_>) -> Result<Option<Self::Row>>;

    async fn fetch_one(&mut self, query: Query<'_>) -> Result<Self::Row> {
        self.fetch_optional(query).await?.ok_or(StoreError::NotFound("no row returned".into()))
    }

    /// The first column of the one row.
    async fn scalar<T: Column>(&mut self, query: Query<'_>) -> Result<T> {
        T::read(&self.fetch_one(query).await?, Col::Index(0))
    }

    /// The first column of every row.
    async fn scalar_all<T: Column>(&mut self, query: Query<'_>) -> Result<Vec<T>> {
        self.fetch_all(query).await?.iter().map(|row| T::read(row, Col::Index(0))).collect()
    }

    /// The first column of the row, if there is one.
    async fn scalar_optional<T: Column>(&mut self, query: Query<'_>) -> Result<Option<T>> {
        self.fetch_optional(query).await?.map(|row| T::read(&row, Col::Index(0))).transpose()
    }
}

/// A write transaction; dropped without commit, it rolls back.
#[async_trait]
pub trait Transaction: Exec + Sized {
    async fn commit(self) -> Result<()>;
    async fn rollback(self) -> Result<()>;
}

/// A database: its pool and how it opens write transactions.
#[async_trait]
pub trait Engine: Send + Sync + Clone + 'static {
    type Row: Row;
    type Pool<'a>: Exec<Row = Self::Row>
    where
        Self: 'a;
    type Tx: Transaction<Row = Self::Row> + 'static;

    /// `sqlite` or `postgres`.
    fn name(&self) -> &'static str;
    /// Appended to a `select` that must lock the rows it reads until commit
    /// (empty where the engine has a single writer anyway).
    fn for_update(&self) -> &'static str;
    /// Whether a `with` clause may hold `insert`/`update` statements
    /// (PostgreSQL), so several writes can be one statement.
    fn writes_in_with(&self) -> bool;
    /// How many rows of `columns` values one multi-row statement should carry.
    fn rows_per_statement(&self, columns: usize) -> usize;
    /// Whether each statement is a round trip to a server (PostgreSQL), so
    /// that concurrent reads are worth gathering into one.
    fn round_trips(&self) -> bool;
    /// Whether the engine takes array parameters (PostgreSQL), so that a
    /// statement over many rows can be one text whatever their number
    /// ([`Query::push_unnest`]).
    fn arrays(&self) -> bool;
    fn pool(&self) -> Self::Pool<'_>;
    /// A connection of the hot path's own pool, for the group committer's
    /// and the gathered reads' statements, kept between them ([`Kept`]);
    /// from the ordinary pool where there is no hot pool.
    type Held: Exec<Row = Self::Row> + 'static;
    async fn hold_hot(&self) -> Result<Self::Held>;
    /// The SQLite file this store writes, for a connection of its own
    /// (`None` on PostgreSQL and for a read-only copy).
    fn sqlite_file(&self) -> Option<&Path>;
    async fn begin_write(&self) -> Result<Self::Tx>;
    /// A write transaction on the hot path's pool (its statements planned
    /// once per connection), for the group committer's transactions of
    /// several statements; [`Engine::begin_write`] where there is no hot pool.
    async fn begin_hot(&self) -> Result<Self::Tx>;
    fn metrics(&self) -> &StoreMetrics;
    fn pool_state(&self) -> PoolState;
    /// Closes the pool once its connections are returned (SQLite checkpoints
    /// its write-ahead log as the last one closes).
    async fn close(&self);
}

/// What differs per engine.
pub trait Dialect: sqlx::Database {
    const NAME: &'static str;
    /// Opens a write transaction. SQLite's `BEGIN IMMEDIATE` takes the write
    /// lock up front instead of failing when a reader later wants to write.
    const BEGIN_WRITE: &'static str;
    const FOR_UPDATE: &'static str;
    /// Whether `with` may hold data-modifying statements.
    const WRITES_IN_WITH: bool;
    /// The values one statement should bind. SQLite's driver finds each
    /// parameter's name by a linear scan, so binding costs the square of a
    /// statement's values there: many small statements (they cost no round
    /// trip in process) beat one large one. PostgreSQL pays per round trip.
    const BINDS_PER_STATEMENT: usize;
    /// Whether each statement is a round trip to a server.
    const ROUND_TRIPS: bool;
    /// Whether a column of values may be bound as one array parameter.
    const ARRAYS: bool;
    fn rows_affected(result: &Self::QueryResult) -> u64;
    /// Binds a column of values as one array parameter.
    fn bind_array<'q>(
        query: sqlx::query::Query<'q, Self, Self::Arguments>,
        array: Array<'_>,
    ) -> Result<sqlx::query::Query<'q, Self, Self::Arguments>>;
}

impl Dialect for Sqlite {
    const NAME: &'static str = "sqlite";
    const BEGIN_WRITE: &'static str = "BEGIN IMMEDIATE";
    const FOR_UPDATE: &'static str = "";
    const WRITES_IN_WITH: bool = false;
    const BINDS_PER_STATEMENT: usize = 256;
    const ROUND_TRIPS: bool = false;
    const ARRAYS: bool = false;
    fn rows_affected(result: &Self::QueryResult) -> u64 {
        result.rows_affected()
    }
    fn bind_array<'q>(
        _: sqlx::query::Query<'q, Self, Self::Arguments>,
        array: Array<'_>,
    ) -> Result<sqlx::query::Query<'q, Self, Self::Arguments>> {
        Err(array.unsupported())
    }
}

impl Dialect for Postgres {
    const NAME: &'static str = "postgres";
    const BEGIN_WRITE: &'static str = "BEGIN";
    const FOR_UPDATE: &'static str = " for update";
    const WRITES_IN_WITH: bool = true;
    const BINDS_PER_STATEMENT: usize = 4096;
    const ROUND_TRIPS: bool = true;
    const ARRAYS: bool = true;
    fn rows_affected(result: &Self::QueryResult) -> u64 {
        result.rows_affected()
    }
    fn bind_array<'q>(
        query: sqlx::query::Query<'q, Self, Self::Arguments>,
        array: Array<'_>,
    ) -> Result<sqlx::query::Query<'q, Self, Self::Arguments>> {
        fn borrowed<'a, T: ?Sized + ToOwned>(column: &'a [Option<Cow<'_, T>>]) -> Vec<Option<&'a T>> {
            column.iter().map(|v| v.as_deref()).collect()
        }
        Ok(match array {
            Array::Int(v) => query.bind(v),
            Array::Int4(v) => query.bind(v),
            Array::Bool(v) => query.bind(v),
            Array::Text(v) => query.bind(borrowed(&v)),
            Array::Bytes(v) => query.bind(borrowed(&v)),
            Array::Uuid(v) => query.bind(v),
            Array::Time(v) => query.bind(v),
        })
    }
}

/// A sqlx driver as the store uses it. Every sqlx bound is stated once, on
/// the blanket implementation below; the rest of the store sees only this.
#[async_trait]
pub trait Driver: Dialect {
    async fn run(conn: &mut Self::Connection, query: Query<'_>) -> Result<u64>;
    async fn fetch_all(conn: &mut Self::Connection, query: Query<'_>) -> Result<Vec<Self::Row>>;
    async fn fetch_optional(conn: &mut Self::Connection, query: Query<'_>) -> Result<Option<Self::Row>>;
    fn read_i64(row: &Self::Row, col: Col<'_>) -> Result<Option<i64>>;
    fn read_i32(row: &Self::Row, col: Col<'_>) -> Result<Option<i32>>;
    fn read_bool(row: &Self::Row, col: Col<'_>) -> Result<Option<bool>>;
    fn read_text(row: &Self::Row, col: Col<'_>) -> Result<Option<String>>;
    fn read_bytes(row: &Self::Row, col: Col<'_>) -> Result<Option<Vec<u8>>>;
    fn read_uuid(row: &Self::Row, col: Col<'_>) -> Result<Option<Uuid>>;
    fn read_time(row: &Self::Row, col: Col<'_>) -> Result<Option<DateTime<Utc>>>;
}

fn get<'r, DB, T>(row: &'r DB::Row, col: Col<'_>) -> Result<Option<T>>
where
    DB: sqlx::Database,
    Option<T>: Decode<'r, DB> + Type<DB>,
    for<'n> &'n str: ColumnIndex<DB::Row>,
    usize: ColumnIndex<DB::Row>,
{
    Ok(match col {
        Col::Name(name) => sqlx::Row::try_get(row, name).classified()?,
        Col::Index(index) => sqlx::Row::try_get(row, index).classified()?,
    })
}

fn bind<'q, DB>(query: Query<'q>) -> Result<sqlx::query::Query<'q, DB, DB::Arguments>>
where
    DB: Dialect,
    for<'t> Option<i64>: Encode<'t, DB> + Type<DB>,
    for<'t> Option<i32>: Encode<'t, DB> + Type<DB>,
    for<'t> Option<bool>: Encode<'t, DB> + Type<DB>,
    for<'t> Option<&'t str>: Encode<'t, DB> + Type<DB>,
    for<'t> Option<&'t [u8]>: Encode<'t, DB> + Type<DB>,
    for<'t> Option<Uuid>: Encode<'t, DB> + Type<DB>,
    for<'t> Option<DateTime<Utc>>: Encode<'t, DB> + Type<DB>,
{
    let Query { sql, args, .. } = query;
    let mut q = sqlx::query::<DB>(sqlx::AssertSqlSafe(sql));
    for arg in args {
        q = match arg {
            Value::Int(v) => q.bind(v),
            Value::Int4(v) => q.bind(v),
            Value::Bool(v) => q.bind(v),
            Value::Text(v) => q.bind(v.as_deref()),
            Value::Bytes(v) => q.bind(v.as_deref()),
            Value::Uuid(v) => q.bind(v),
            Value::Time(v) => q.bind(v),
            Value::Array(array) => DB::bind_array(q, *array)?,
        };
    }
    Ok(q)
}

#[async_trait]
impl<DB> Driver for DB
where
    DB: Dialect,
    DB::Arguments: Send + sqlx::IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'c> &'c Pool<DB>: Executor<'c, Database = DB>,
    for<'t> Option<i64>: Encode<'t, DB> + Decode<'t, DB> + Type<DB>,
    for<'t> Option<i32>: Encode<'t, DB> + Decode<'t, DB> + Type<DB>,
    for<'t> Option<bool>: Encode<'t, DB> + Decode<'t, DB> + Type<DB>,
    for<'t> Option<&'t str>: Encode<'t, DB> + Type<DB>,
    for<'t> Option<String>: Decode<'t, DB> + Type<DB>,
    for<'t> Option<&'t [u8]>: Encode<'t, DB> + Type<DB>,
    for<'t> Option<Vec<u8>>: Decode<'t, DB> + Type<DB>,
    for<'t> Option<Uuid>: Encode<'t, DB> + Decode<'t, DB> + Type<DB>,
    for<'t> Option<DateTime<Utc>>: Encode<'t, DB> + Decode<'t, DB> + Type<DB>,
    for<'n> &'n str: ColumnIndex<DB::Row>,
    usize: ColumnIndex<DB::Row>,
{
    async fn run(conn: &mut Self::Connection, query: Query<'_>) -> Result<u64> {
        let done = bind::<DB>(query)?.execute(conn).await.classified()?;
        Ok(DB::rows_affected(&done))
    }

    async fn fetch_all(conn: &mut Self::Connection, query: Query<'_>) -> Result<Vec<Self::Row>> {
        Ok(bind::<DB>(query)?.fetch_all(conn).await.classified()?)
    }

    async fn fetch_optional(conn: &mut Self::Connection, query: Query<'_>) -> Result<Option<Self::Row>> {
        Ok(bind::<DB>(query)?.fetch_optional(conn).await.classified()?)
    }

    fn read_i64(row: &Self::Row, col: Col<'_>) -> Result<Option<i64>> {
        get::<DB, i64>(row, col)
    }
    fn read_i32(row: &Self::Row, col: Col<'_>) -> Result<Option<i32>> {
        get::<DB, i32>(row, col)
    }
    fn read_bool(row: &Self::Row, col: Col<'_>) -> Result<Option<bool>> {
        get::<DB, bool>(row, col)
    }
    fn read_text(row: &Self::Row, col: Col<'_>) -> Result<Option<String>> {
        get::<DB, String>(row, col)
    }
    fn read_bytes(row: &Self::Row, col: Col<'_>) -> Result<Option<Vec<u8>>> {
        get::<DB, Vec<u8>>(row, col)
    }
    fn read_uuid(row: &Self::Row, col: Col<'_>) -> Result<Option<Uuid>> {
        get::<DB, Uuid>(row, col)
    }
    fn read_time(row: &Self::Row, col: Col<'_>) -> Result<Option<DateTime<Utc>>> {
        get::<DB, DateTime<Utc>>(row, col)
    }
}

/// A row of a sqlx driver.
pub struct DbRow<DB: sqlx::Database>(DB::Row);

impl<DB: Driver> Row for DbRow<DB> {
    fn read_i64(&self, col: Col<'_>) -> Result<Option<i64>> {
        DB::read_i64(&self.0, col)
    }
    fn read_i32(&self, col: Col<'_>) -> Result<Option<i32>> {
        DB::read_i32(&self.0, col)
    }
    fn read_bool(&self, col: Col<'_>) -> Result<Option<bool>> {
        DB::read_bool(&self.0, col)
    }
    fn read_text(&self, col: Col<'_>) -> Result<Option<String>> {
        DB::read_text(&self.0, col)
    }
    fn read_bytes(&self, col: Col<'_>) -> Result<Option<Vec<u8>>> {
        DB::read_bytes(&self.0, col)
    }
    fn read_uuid(&self, col: Col<'_>) -> Result<Option<Uuid>> {
        DB::read_uuid(&self.0, col)
    }
    fn read_time(&self, col: Col<'_>) -> Result<Option<DateTime<Utc>>> {
        DB::read_time(&self.0, col)
    }
    fn has_column(&self, name: &str) -> bool {
        use sqlx::Column;
        sqlx::Row::columns(&self.0).iter().any(|c| c.name() == name)
    }
}

/// A sqlx pool as an [`Engine`], with what it measures of itself.
pub struct Db<DB: sqlx::Database> {
    pool: Pool<DB>,
    /// Where write transactions run, when not on `pool`: SQLite's one writer
    /// connection. SQLite takes one writer at a time; with every pooled
    /// connection free to begin a write, the others wait in SQLite's busy
    /// handler, which sleeps (1, 2, 5, 10 … 100 ms) instead of queueing, so
    /// requests' writes queue here, in order, for the one connection instead.
    writer: Option<Pool<DB>>,
    /// The background jobs' own writer connection (SQLite): queued behind
    /// every request, the log integrator's rounds fell seconds behind under
    /// load; beside them, it meets at most one other writer.
    background: Option<Pool<DB>>,
    /// The SQLite file, for the group committer's own connection.
    file: Option<std::path::PathBuf>,
    /// PostgreSQL: the connections of the hot path's batch statements and
    /// gathered reads (see [`hot_pool_options`]).
    hot: Option<Pool<DB>>,
    metrics: Arc<StoreMetrics>,
}

impl<DB: sqlx::Database> Clone for Db<DB> {
    fn clone(&self) -> Db<DB> {
        Db {
            pool: self.pool.clone(),
            writer: self.writer.clone(),
            background: self.background.clone(),
            file: self.file.clone(),
            hot: self.hot.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

impl<DB: sqlx::Database> Db<DB> {
    fn new(pool: Pool<DB>) -> Db<DB> {
        Db { pool, writer: None, background: None, file: None, hot: None, metrics: Arc::default() }
    }

    fn write_pool(&self) -> &Pool<DB> {
        let background = is_background();
        match (&self.background, &self.writer) {
            (Some(pool), _) if background => pool,
            (_, Some(pool)) => pool,
            _ => &self.pool,
        }
    }
}

pub(crate) use anchor_ports::background::is_background;

/// The pool, lent for one statement at a time; a statement that may write
/// (anything but a `select`) runs on the writer connection when there is one.
pub struct PoolRef<'a, DB: sqlx::Database>(&'a Pool<DB>, Option<&'a Pool<DB>>, &'a StoreMetrics);

impl<'a, DB: sqlx::Database> PoolRef<'a, DB> {
    fn for_statement(&self, query: &Query<'_>) -> (&'a Pool<DB>, &'a StoreMetrics) {
        // `vacuum into` (a backup) only reads: on the writer it would hold up every write.
        let verb = query.sql.trim_start().get(..6);
        let reads = verb.is_some_and(|verb| verb.eq_ignore_ascii_case("select") || verb.eq_ignore_ascii_case("vacuum"));
        (if reads { self.0 } else { self.1.unwrap_or(self.0) }, self.2)
    }
}

/// Statements run one at a time on one sqlx connection, in whatever holds
/// it: a write transaction ([`Tx`]) or a connection taken from a pool
/// ([`Held`]).
pub struct OnConn<DB, C>(C, Arc<StoreMetrics>, PhantomData<fn() -> DB>);

impl<DB, C> OnConn<DB, C> {
    fn new(conn: C, metrics: Arc<StoreMetrics>) -> OnConn<DB, C> {
        OnConn(conn, metrics, PhantomData)
    }
}

/// A write transaction on a sqlx pool.
pub type Tx<DB> = OnConn<DB, sqlx::Transaction<'static, DB>>;

/// A connection taken from a sqlx pool, kept until it is dropped.
pub type Held<DB> = OnConn<DB, sqlx::pool::PoolConnection<DB>>;

#[async_trait]
impl<DB: Driver, C: DerefMut<Target = DB::Connection> + Send> Exec for OnConn<DB, C> {
    type Row = DbRow<DB>;
    async fn execute(&mut self, query: Query<'_>) -> Result<u64> {
        let OnConn(conn, metrics, _) = self;
        timed(metrics, query, async |q| DB::run(conn, q).await).await
    }
    async fn fetch_all(&mut self, query: Query<'_>) -> Result<Vec<DbRow<DB>>> {
        let OnConn(conn, metrics, _) = self;
        Ok(rows::<DB>(timed(metrics, query, async |q| DB::fetch_all(conn, q).await).await?))
    }
    async fn fetch_optional(&mut self, query: Query<'_>) -> Result<Option<DbRow<DB>>> {
        let OnConn(conn, metrics, _) = self;
        Ok(timed(metrics, query, async |q| DB::fetch_optional(conn, q).await).await?.map(DbRow))
    }
}

/// A connection of the hot pool, kept by one of the hot path's tasks (the
/// committer's creates or confirmations, a reader's kind of read) from one
/// statement to the next while it has work queued, and let go when it has
/// none (so the pool closes at shutdown once the tasks are idle).
///
/// sqlx checks a pooled connection each time it lends it and again each
/// time it takes it back, a round trip to the server each: twice per batch
/// statement, on a statement that is itself one round trip. A connection
/// whose statement failed is let go, so a broken one is not used again.
pub(crate) struct Kept<E: Engine> {
    db: E,
    /// The connection, and when it was taken from the pool.
    held: Option<(E::Held, Instant)>,
}

/// How long a connection is kept at most: then it goes back to the pool,
/// whose checks (a round trip, its maximum lifetime) run as usual.
const KEPT_AT_MOST: StdDuration = StdDuration::from_secs(60);

/// How long a task with nothing to do keeps its connections before it lets
/// them go: long beside the gaps between a loaded server's statements, short
/// enough that an idle server's pool can close at once at shutdown.
pub(crate) const KEPT_IDLE: StdDuration = StdDuration::from_millis(100);

impl<E: Engine> Kept<E> {
    pub(crate) fn new(db: &E) -> Kept<E> {
        Kept { db: db.clone(), held: None }
    }

    /// Returns the connection to the pool (nothing is queued).
    pub(crate) fn release(&mut self) {
        self.held = None;
    }

    async fn take(&mut self) -> Result<(E::Held, Instant)> {
        match self.held.take() {
            Some(held) => Ok(held),
            None => Ok((self.db.hold_hot().await?, Instant::now())),
        }
    }

    /// Keeps `conn` for the next statement if this one succeeded and it has
    /// not been kept for [`KEPT_AT_MOST`].
    fn keep<T>(&mut self, (conn, since): (E::Held, Instant), result: Result<T>) -> Result<T> {
        if result.is_ok() && since.elapsed() < KEPT_AT_MOST {
            self.held = Some((conn, since));
        }
        result
    }
}

#[async_trait]
impl<E: Engine> Exec for Kept<E> {
    type Row = E::Row;
    async fn execute(&mut self, query: Query<'_>) -> Result<u64> {
        let mut held = self.take().await?;
        let result = held.0.execute(query).await;
        self.keep(held, result)
    }
    async fn fetch_all(&mut self, query: Query<'_>) -> Result<Vec<E::Row>> {
        let mut held = self.take().await?;
        let result = held.0.fetch_all(query).await;
        self.keep(held, result)
    }
    async fn fetch_optional(&mut self, query: Query<'_>) -> Result<Option<E::Row>> {
        let mut held = self.take().await?;
        let result = held.0.fetch_optional(query).await;
        self.keep(held, result)
    }
}

fn rows<DB: sqlx::Database>(rows: Vec<DB::Row>) -> Vec<DbRow<DB>> {
    rows.into_iter().map(DbRow).collect()
}

/// Whether a request for a connection now has to wait for one to be
/// returned: none is idle and the pool is at its maximum.
fn must_wait<DB: sqlx::Database>(pool: &Pool<DB>) -> bool {
    pool.num_idle() == 0 && pool.size() >= pool.options().get_max_connections()
}

/// A connection from the pool (checked by sqlx as usual); a request that
/// found the pool exhausted is counted as a wait, with its duration.
async fn acquire<DB: sqlx::Database>(pool: &Pool<DB>, metrics: &StoreMetrics) -> Result<sqlx::pool::PoolConnection<DB>> {
    if !must_wait(pool) {
        return pool.acquire().await.classified();
    }
    metrics.acquire_waits.inc();
    let started = Instant::now();
    let connection = pool.acquire().await.classified()?;
    metrics.acquire_wait_seconds.observe(started.elapsed().as_secs_f64());
    Ok(connection)
}

/// Runs `f` on `query`, timing it under the statement's label.
async fn timed<T>(metrics: &StoreMetrics, query: Query<'_>, f: impl AsyncFnOnce(Query<'_>) -> Result<T>) -> Result<T> {
    let started = Instant::now();
    let label = query.metrics_label();
    let result = f(query).await;
    metrics.observe_statement(label, started.elapsed().as_secs_f64());
    result
}

#[async_trait]
impl<DB: Driver> Exec for PoolRef<'_, DB> {
    type Row = DbRow<DB>;
    async fn execute(&mut self, query: Query<'_>) -> Result<u64> {
        let (pool, metrics) = self.for_statement(&query);
        timed(metrics, query, async |q| DB::run(&mut *acquire(pool, metrics).await?, q).await).await
    }
    async fn fetch_all(&mut self, query: Query<'_>) -> Result<Vec<DbRow<DB>>> {
        let (pool, metrics) = self.for_statement(&query);
        Ok(rows::<DB>(timed(metrics, query, async |q| DB::fetch_all(&mut *acquire(pool, metrics).await?, q).await).await?))
    }
    async fn fetch_optional(&mut self, query: Query<'_>) -> Result<Option<DbRow<DB>>> {
        let (pool, metrics) = self.for_statement(&query);
        Ok(timed(metrics, query, async |q| DB::fetch_optional(&mut *acquire(pool, metrics).await?, q).await).await?.map(DbRow))
    }
}

#[async_trait]
impl<DB: Driver> Transaction for Tx<DB> {
    async fn commit(self) -> Result<()> {
        let started = Instant::now();
        let OnConn(tx, metrics, _) = self;
        let result = tx.commit().await;
        metrics.observe_step("commit", started.elapsed().as_secs_f64());
        Ok(result.classified()?)
    }
    async fn rollback(self) -> Result<()> {
        Ok(self.0.rollback().await.classified()?)
    }
}

#[async_trait]
impl<DB: Driver> Engine for Db<DB> {
    type Row = DbRow<DB>;
    type Pool<'a> = PoolRef<'a, DB>;
    type Tx = Tx<DB>;

    fn name(&self) -> &'static str {
        <DB as Dialect>::NAME
    }
    fn for_update(&self) -> &'static str {
        DB::FOR_UPDATE
    }
    fn writes_in_with(&self) -> bool {
        DB::WRITES_IN_WITH
    }
    fn round_trips(&self) -> bool {
        DB::ROUND_TRIPS
    }
    fn arrays(&self) -> bool {
        DB::ARRAYS
    }
    fn rows_per_statement(&self, columns: usize) -> usize {
        (DB::BINDS_PER_STATEMENT / columns.max(1)).max(1)
    }
    fn sqlite_file(&self) -> Option<&Path> {
        self.file.as_deref()
    }
    fn pool(&self) -> PoolRef<'_, DB> {
        let writer = self.writer.as_ref().map(|_| self.write_pool());
        PoolRef(&self.pool, writer, &self.metrics)
    }
    type Held = Held<DB>;
    async fn hold_hot(&self) -> Result<Held<DB>> {
        let pool = self.hot.as_ref().unwrap_or(&self.pool);
        Ok(OnConn::new(acquire(pool, &self.metrics).await?, self.metrics.clone()))
    }
    async fn begin_write(&self) -> Result<Tx<DB>> {
        self.begin_on(self.write_pool()).await
    }
    async fn begin_hot(&self) -> Result<Tx<DB>> {
        match &self.hot {
            Some(hot) if !is_background() => self.begin_on(hot).await,
            _ => self.begin_write().await,
        }
    }
    fn metrics(&self) -> &StoreMetrics {
        &self.metrics
    }
    fn pool_state(&self) -> PoolState {
        let size = self.pool.size();
        PoolState { size, idle: (self.pool.num_idle() as u32).min(size), max: self.pool.options().get_max_connections() }
    }
    async fn close(&self) {
        for writer in [&self.writer, &self.background, &self.hot].into_iter().flatten() {
            writer.close().await;
        }
        self.pool.close().await;
    }
}

impl<DB: Driver> Db<DB> {
    async fn begin_on(&self, pool: &Pool<DB>) -> Result<Tx<DB>> {
        let started = Instant::now();
        let waits = must_wait(pool);
        let tx = pool.begin_with(DB::BEGIN_WRITE).await.classified()?;
        if waits {
            self.metrics.acquire_waits.inc();
            self.metrics.acquire_wait_seconds.observe(started.elapsed().as_secs_f64());
        }
        self.metrics.observe_step("begin", started.elapsed().as_secs_f64());
        Ok(OnConn::new(tx, self.metrics.clone()))
    }
}

/// Runs this build's migrations on `pool`, beside newer ones it may serve
/// beside (`serve_beside`). A fresh database records none.
/// `$recorded` answers whether the database has sqlx's table of migrations
/// (asked first, so that a fresh database logs no error).
macro_rules! migrate {
    ($migrator:expr, $pool:expr, $recorded:expr) => {{
        let pool = $pool;
        let mut migrator = $migrator;
        let recorded: bool = sqlx::query_scalar($recorded).fetch_one(pool).await.unwrap_or(false);
        let applied: Vec<i64> = if recorded {
            sqlx::query_scalar("select version from _sqlx_migrations where success").fetch_all(pool).await.unwrap_or_default()
        } else {
            Vec::new()
        };
        let unknown = anchor_domain::schema::unknown(|v| migrator.version_exists(v), applied);
        let rules: Vec<(i64, i64)> = if unknown.is_empty() {
            Vec::new()
        } else {
            sqlx::query_as("select version, runs_beside_builds_from from migration_rules").fetch_all(pool).await.unwrap_or_default()
        };
        serve_beside(&mut migrator, &unknown, &rules)?;
        migrator.run(pool).await.classified()?;
    }};
}

/// The row lock to append to a statement where `for_update` (the engine's
/// [`Engine::for_update`]) would be: on PostgreSQL `for no key update`,
/// which excludes the row's other writers but not another transaction's
/// foreign keys to it (they only share the row); none on SQLite, which has
/// one writer.
pub(crate) fn for_no_key_update(for_update: &str) -> &'static str {
    if for_update.is_empty() { "" } else { " for no key update" }
}

/// The write-ahead log's length, in pages, past which a connection that
/// commits checkpoints it (SQLite's default is 1,000), on every connection
/// that writes (decision 0081). A checkpoint copies the newest frame of each
/// page to the database file, between one batch's commit and the next
/// batch's begin: four times fewer of them copy the hot pages (the tables'
/// last pages, the indexes' upper levels, the agents' rows) four times
/// fewer times. 4,000 frames still fit the first of the log's index hash
/// tables (4,096 frames each), which a reader searches for every page.
pub(crate) const WAL_PAGES: i64 = 4000;

/// Opens (creating if needed) a SQLite file in WAL mode and runs the migrations.
pub async fn open_sqlite(path: &Path) -> Result<Db<Sqlite>> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Database(e.to_string()))?;
    }
    // Full sync: a commit is on disk (the write-ahead log synced) before it
    // is acknowledged, so a power loss loses nothing answered.
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(StdDuration::from_secs(30))
        .foreign_keys(true)
        .pragma("wal_autocheckpoint", WAL_PAGES.to_string());
    // A connection to a file in this process does not go stale: checking it
    // before each use would be one more hand-over to its worker thread and
    // back on every statement.
    let pool_options = || SqlitePoolOptions::new().test_before_acquire(false);
    let writer = pool_options().max_connections(1).connect_with(options.clone()).await.classified()?;
    migrate!(sqlite_migrator(), &writer, "select count(*) > 0 from sqlite_master where type = 'table' and name = '_sqlx_migrations'");
    let background = pool_options().max_connections(1).connect_with(options.clone()).await.classified()?;
    let pool = pool_options().max_connections(8).connect_with(options).await.classified()?;
    Ok(Db { writer: Some(writer), background: Some(background), file: Some(path.to_path_buf()), ..Db::new(pool) })
}

/// Connects to PostgreSQL and runs the migrations. `schema`, when given, is
/// created if missing and used as the search path (tests isolate themselves
/// this way).
pub async fn connect_postgres(url: &str, schema: Option<&str>) -> Result<Db<Postgres>> {
    // One host, or several (libpq's list): then the primary among them.
    let mut hosts = crate::hosts::parse(url)?;
    let primary = match hosts.len() {
        1 => 0,
        n => crate::hosts::find_primary(&hosts)
            .await
            .ok_or_else(|| StoreError::Unsupported(format!("none of the {n} hosts of the database URL is a primary taking writes")))?,
    };
    if let Some(schema) = schema {
        let admin = PgPoolOptions::new().max_connections(1).connect_with(hosts[primary].clone()).await.classified()?;
        let create = format!("create schema if not exists \"{}\"", schema.replace('"', ""));
        sqlx::raw_sql(sqlx::AssertSqlSafe(create)).execute(&admin).await.classified()?;
        admin.close().await;
        hosts = hosts.into_iter().map(|o| o.options([("search_path", schema)])).collect();
    }
    let options = hosts[primary].clone();
    let following = (hosts.len() > 1).then(|| crate::hosts::Following::new(hosts, primary));
    let pool_options = |max: u32| {
        let pool = PgPoolOptions::new().max_connections(max).acquire_timeout(ACQUIRE_TIMEOUT);
        match &following {
            None => pool,
            Some(following) => {
                let following = following.clone();
                pool.after_connect(|connection, _| Box::pin(crate::hosts::refuse_standby(connection))).before_acquire(move |_, meta| {
                    let stale = following.predates_switch(meta.age);
                    Box::pin(async move { Ok(!stale) })
                })
            }
        }
    };
    let pool = pool_options(ORDINARY_CONNECTIONS).connect_with(options.clone()).await.classified()?;
    migrate!(postgres_migrator(), &pool, "select to_regclass('_sqlx_migrations') is not null");
    let hot = pool_options(HOT_CONNECTIONS).connect_lazy_with(hot_pool_options(options));
    // A server (or a pooler in front of it) may refuse the hot pool's
    // settings; its statements then run on the ordinary pool, said once here
    // rather than as every batch failing.
    let hot = match hot.acquire().await {
        Ok(_) => Some(hot),
        Err(error) => {
            tracing::warn!(%error, "the hot path's connection settings were refused; its statements use the ordinary pool");
            None
        }
    };
    if let Some(following) = following {
        crate::hosts::watch(following, pool.clone(), hot.clone(), hot_pool_options);
    }
    Ok(Db { hot, ..Db::new(pool) })
}

/// How long a statement waits for a PostgreSQL connection before it is
/// answered as storage unavailable (503 with Retry-After): while the server
/// is down or failing over, a request learns it in seconds rather than
/// holding its client (and a load balancer's check) for sqlx's default 30 s.
const ACQUIRE_TIMEOUT: StdDuration = StdDuration::from_secs(2);

/// The most connections of the hot path's pool: the committer's four batch
/// statements (the paid creates' one of them, decision 0090) and the
/// transaction of creates whose base fee Trial pays, and the reader's five
/// kinds of read, each in flight at once and each statement keeping its
/// connection while it has work ([`Kept`]), and to spare, so a task
/// whose connection is still being returned (after a failure, or after
/// [`KEPT_AT_MOST`]) need not wait for it. (Ten in flight at most since
/// one reader task reads, not two; four to spare.)
const HOT_CONNECTIONS: u32 = 14;

/// The most connections a host's ordinary pool opens to the primary
/// (besides the hot path's [`HOT_CONNECTIONS`]); the deployment manual's
/// sizing of `max_connections` is their sum per host.
const ORDINARY_CONNECTIONS: u32 = 16;

/// How the hot path's connections are set up. Its statements have one text
/// each whatever their number of rows (array parameters), and each is a
/// lookup or a write by key:
/// - `plan_cache_mode = force_generic_plan`: each connection plans each
///   statement once. Left to choose, PostgreSQL plans every execution again,
///   since a plan for the arrays' actual lengths always looks cheaper than
///   the generic one (about a quarter of PostgreSQL's time per anchored DD,
///   BENCHMARKS.md).
/// - `enable_seqscan = off`: a plan made while a table is small (a fresh
///   database) would scan the whole table, and keep doing so as it grows
///   (measured: a declaration read by dd_id scanning 4,000 rows); by key,
///   the index is right at every size.
/// - `statement_timeout`: one committer carries all of its host's hot writes, so
///   a statement stuck behind a lock is cancelled (and rolled back) after
///   10 s, and its writes run alone, each waiting only for its own.
fn hot_pool_options(options: PgConnectOptions) -> PgConnectOptions {
    options.options([("plan_cache_mode", "force_generic_plan"), ("enable_seqscan", "off"), ("statement_timeout", "10000")])
}

/// The migration files, embedded by build.rs: (version, description, SQL).
mod embedded {
    include!(concat!(env!("OUT_DIR"), "/migrations.rs"));
}

/// The migrator `sqlx::migrate!` would build from the same files: the same
/// versions, descriptions and checksums (SHA-384 of each file), so a database
/// migrated by an earlier build is recognised as it is.
fn migrator(files: &'static [(i64, &'static str, &'static str)]) -> sqlx::migrate::Migrator {
    use sqlx::SqlSafeStr as _;
    use sqlx::migrate::{Migration, MigrationType, Migrator};
    let carried = carried_up_to();
    Migrator::with_migrations(
        files
            .iter()
            .filter(|(version, _, _)| *version <= carried)
            .map(|&(version, description, sql)| {
                let no_tx = sql.starts_with("-- no-transaction");
                Migration::new(version, description.into(), MigrationType::Simple, sql.into_sql_str(), no_tx)
            })
            .collect(),
    )
}

/// The newest migration this build carries: every one, unless the test
/// knob `ANCHOR_TEST_MIGRATIONS_UP_TO=N` has this build play an earlier
/// release that carried migrations up to N only (the rolling-upgrade test
/// runs such hosts beside a newer schema; decision 0067).
fn carried_up_to() -> i64 {
    std::env::var("ANCHOR_TEST_MIGRATIONS_UP_TO").ok().and_then(|n| n.trim().parse().ok()).unwrap_or(i64::MAX)
}

/// Lets `migrator` start on a database that records `unknown` migrations it
/// does not carry: their `rules` (version, newest migration of the oldest
/// build it runs beside) must allow this build beside them; they are then
/// left as they are (decision 0067).
fn serve_beside(migrator: &mut sqlx::migrate::Migrator, unknown: &[i64], rules: &[(i64, i64)]) -> Result<()> {
    if unknown.is_empty() {
        return Ok(());
    }
    let newest = migrator.iter().map(|m| m.version).max().unwrap_or(0);
    anchor_domain::schema::runs_beside(newest, unknown, rules).map_err(StoreError::Unsupported)?;
    migrator.set_ignore_missing(true);
    Ok(())
}

pub fn sqlite_migrator() -> sqlx::migrate::Migrator {
    migrator(embedded::SQLITE)
}

pub fn postgres_migrator() -> sqlx::migrate::Migrator {
    migrator(embedded::POSTGRES)
}

/// An existing SQLite file, read-only, as it is (no migration, not created).
pub async fn open_sqlite_read_only(path: &Path) -> Result<Db<Sqlite>> {
    let options =
        SqliteConnectOptions::new().filename(path).read_only(true).create_if_missing(false).busy_timeout(StdDuration::from_secs(30));
    let pool = SqlitePoolOptions::new().max_connections(2).connect_with(options).await.classified()?;
    Ok(Db::new(pool))
}

/// A PostgreSQL standby, read-only, as it is. The pool connects lazily, so a
/// replica that is down at start is tried again at the next read.
pub async fn connect_postgres_replica(url: &str, schema: Option<&str>) -> Result<Db<Postgres>> {
    let mut options: PgConnectOptions = url.parse::<PgConnectOptions>().classified()?;
    options = options.options([("default_transaction_read_only", "on"), ("statement_timeout", "2000")]);
    if let Some(schema) = schema {
        options = options.options([("search_path", schema)]);
    }
    let pool = PgPoolOptions::new().max_connections(16).acquire_timeout(StdDuration::from_millis(500)).connect_lazy_with(options);
    Ok(Db::new(pool))
}

/// A PostgreSQL database as it is (no migration): a restored copy, or a
/// read-only standby.
pub async fn connect_postgres_as_is(url: &str) -> Result<Db<Postgres>> {
    // Of several hosts (libpq's list), the primary, else the first.
    let hosts = crate::hosts::parse(url)?;
    let chosen = if hosts.len() > 1 { crate::hosts::find_primary(&hosts).await.unwrap_or(0) } else { 0 };
    let options = hosts[chosen].clone();
    let pool = PgPoolOptions::new().max_connections(16).connect_with(options).await.classified()?;
    Ok(Db::new(pool))
}

#[cfg(test)]
mod tests {
    use super::{Array, Bind, Value, sql};
    use uuid::Uuid;

    /// The deployment manual sizes the primary's `max_connections` from the
    /// connections each host opens at most: its formula follows the pools.
    #[test]
    fn the_manual_sizes_connections_as_the_pools_open_them() {
        let manual = include_str!("../../../docs/deployment.md");
        let per_host = super::ORDINARY_CONNECTIONS + super::HOT_CONNECTIONS;
        let formula = format!("    {per_host} × N + superuser_reserved_connections");
        assert!(manual.contains(&formula), "docs/deployment.md sizes max_connections with `{formula}`");
        let parts = format!("at most {} connections to the primary", super::ORDINARY_CONNECTIONS);
        assert!(manual.contains(&parts), "docs/deployment.md says `{parts}`");
        let hot = format!("and {} for the hot path's", super::HOT_CONNECTIONS);
        assert!(manual.contains(&hot), "docs/deployment.md says `{hot}`");
    }

    /// The embedded migrators hold what sqlx itself resolves from the folders
    /// (as `sqlx::migrate!` did): every file, with its version, description,
    /// checksum and transaction mode. A checksum that differed would make
    /// every database migrated by an earlier build refuse to start.
    #[tokio::test]
    async fn the_embedded_migrations_are_the_files_as_sqlx_reads_them() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations");
        for (engine, embedded) in [("sqlite", super::sqlite_migrator()), ("postgres", super::postgres_migrator())] {
            let resolved = sqlx::migrate::Migrator::new(root.join(engine)).await.expect("the folder resolves");
            let shape = |m: &sqlx::migrate::Migrator| {
                m.iter().map(|m| (m.version, m.description.to_string(), m.migration_type, m.checksum.to_vec(), m.no_tx)).collect::<Vec<_>>()
            };
            assert!(resolved.iter().count() >= 39, "{engine}: the migrations are found");
            assert_eq!(shape(&embedded), shape(&resolved), "{engine}");
        }
    }

    /// The rule of decision 0067, read off the files: every migration from
    /// 0040 on records its own rule, the same on both engines; an expand one
    /// (0) holds no statement a host of an older build could trip on (a drop,
    /// a rename, a changed or new constraint, a required column without a
    /// default, deleted rows); a contract one names an older migration.
    #[test]
    fn the_migrations_follow_the_expand_and_contract_rule() {
        let mut rules: std::collections::BTreeMap<i64, i64> = Default::default();
        for (engine, files) in [("sqlite", super::embedded::SQLITE), ("postgres", super::embedded::POSTGRES)] {
            let mut seen = std::collections::BTreeMap::new();
            for &(version, description, text) in files {
                for (v, from) in rule_rows(&code_of(text)) {
                    assert!(seen.insert(v, from).is_none(), "{engine} {version}: a second rule for {v}");
                    assert!(v == version || version == 40, "{engine} {version} ({description}) records the rule of {v}");
                }
                if version >= 40 {
                    let from = *seen.get(&version).unwrap_or_else(|| panic!("{engine} {version} ({description}): no rule of its own"));
                    assert!(from < version, "{engine} {version}: a migration runs beside builds older than itself");
                }
            }
            for (&version, &from) in &seen {
                let (_, description, text) = files.iter().find(|f| f.0 == version).expect("a rule names a migration that exists");
                if from == 0
                    && let Some(trip) = expand_trip(text)
                {
                    panic!("{engine} {version} ({description}) is recorded as expand but {trip}");
                }
                if let Some(other) = rules.insert(version, from) {
                    assert_eq!(other, from, "{version}: the engines record different rules");
                }
            }
        }
        assert!(rules.contains_key(&40), "the rules are found");
    }

    /// The (version, runs_beside_builds_from) rows of `code`'s inserts into
    /// migration_rules.
    fn rule_rows(code: &str) -> Vec<(i64, i64)> {
        let mut rows = Vec::new();
        for insert in code.split("insert into migration_rules").skip(1) {
            let values = insert.split(';').next().unwrap_or("");
            let values = values.split_once("values").map(|(_, v)| v).unwrap_or("");
            for tuple in values.split('(').skip(1) {
                let inner = tuple.split(')').next().unwrap_or("");
                let numbers: Vec<i64> = inner.split(',').filter_map(|n| n.trim().parse().ok()).collect();
                assert_eq!(numbers.len(), 2, "a rule row is (version, runs_beside_builds_from): {inner}");
                rows.push((numbers[0], numbers[1]));
            }
        }
        rows
    }

    /// A migration's SQL without comments, on one line, in lower case.
    fn code_of(text: &str) -> String {
        let code: String = text.lines().map(|l| l.split("--").next().unwrap_or("")).collect::<Vec<_>>().join(" ").to_lowercase();
        code.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    /// What in an expand migration's SQL a host of an older build could trip on.
    fn expand_trip(text: &str) -> Option<String> {
        let code = format!(" {} ", code_of(text));
        for form in
            [" drop ", " rename ", " alter column ", " set not null ", " add constraint ", " truncate ", " delete from ", " replace into "]
        {
            if code.contains(form) {
                return Some(format!("holds `{}`", form.trim()));
            }
        }
        for added in code.split(" add column ").skip(1) {
            let column = added.split([',', ';']).next().unwrap_or("");
            if column.contains(" not null") && !column.contains(" default ") {
                return Some(format!("adds a required column without a default: {}", column.trim()));
            }
        }
        None
    }

    /// The rule's own reading: each form it refuses is found, and what an
    /// expand migration does is let through.
    #[test]
    fn the_expand_reading_finds_what_older_builds_trip_on() {
        for trip in [
            "drop table t;",
            "alter table t drop column c;",
            "alter table t rename to u;",
            "alter table t alter column c type bigint;",
            "alter table t alter column c set not null;",
            "alter table t add constraint c check (x > 0);",
            "alter table t add column c text not null;",
            "delete from t;",
        ] {
            assert!(expand_trip(trip).is_some(), "{trip}");
        }
        for fine in [
            "create table t (id bigint primary key, dropped_at timestamptz);",
            "alter table t add column c text;",
            "alter table t add column c bigint not null default 0;",
            "create index t_c on t (c); -- drop this later",
            "insert into migration_rules (version, runs_beside_builds_from) values (41, 0);",
        ] {
            assert_eq!(expand_trip(fine), None, "{fine}");
        }
        assert_eq!(
            rule_rows("insert into migration_rules (version, runs_beside_builds_from) values (39, 0), (40, 0);"),
            vec![(39, 0), (40, 0)]
        );
    }

    #[test]
    fn rows_become_one_array_parameter_per_column_and_one_text_whatever_their_number() {
        let row = |n: i64, hash: Option<&'static str>| vec![("b_i", n.value()), ("b_hash", hash.value()), ("b_id", Uuid::nil().value())];
        let text = |rows: Vec<Vec<(&'static str, Value<'static>)>>| {
            let mut q = sql("select * from ");
            q.push_unnest("input", rows).expect("rows of one shape").push(" where true");
            let (text, args) = q.into_parts();
            (text.into_owned(), args)
        };
        let (one, args) = text(vec![row(0, Some("a"))]);
        let (three, three_args) = text(vec![row(0, Some("a")), row(1, None), row(2, Some("c"))]);
        assert_eq!(one, "select * from unnest($1::int8[], $2::text[], $3::uuid[]) as input (b_i, b_hash, b_id) where true");
        assert_eq!(three, one);
        assert_eq!(args.len(), 3);
        match &three_args[..] {
            [Value::Array(ints), Value::Array(texts), Value::Array(_)] => {
                assert!(matches!(&**ints, Array::Int(v) if *v == [Some(0), Some(1), Some(2)]));
                assert!(matches!(&**texts, Array::Text(v) if v.len() == 3 && v[1].is_none() && v[2].as_deref() == Some("c")));
            }
            other => panic!("three arrays expected, got {other:?}"),
        }
    }

    #[test]
    fn rows_that_differ_in_columns_or_kinds_are_refused_and_nothing_is_appended() {
        let mut q = sql("x");
        assert!(q.push_unnest("input", vec![]).is_none());
        assert!(q.push_unnest("input", vec![vec![("a", 1i64.value())], vec![("b", 1i64.value())]]).is_none());
        assert!(q.push_unnest("input", vec![vec![("a", 1i64.value())], vec![("a", "one".value())]]).is_none());
        assert!(q.push_unnest("input", vec![vec![("a", 1i64.value())], vec![("a", 1i64.value()), ("b", 2i64.value())]]).is_none());
        let (text, args) = q.into_parts();
        assert_eq!((text.as_ref(), args.len()), ("x", 0));
        assert!(Array::of([1i64.value(), Option::<i64>::None.value()]).is_some());
        assert!(Array::of([1i64.value(), 1i32.value()]).is_none());
    }
}
