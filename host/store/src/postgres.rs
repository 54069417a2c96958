//! The production store: PostgreSQL, shareable by several stateless hosts.

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

pub struct PostgresStore {
    pool: PgPool,
}

impl PostgresStore {
    /// Connects and runs the migrations. `schema`, when given, is created if
    /// missing and used as the search path (tests isolate themselves this way).
    pub async fn connect(url: &str, schema: Option<&str>) -> crate::Result<PostgresStore> {
        let mut options: PgConnectOptions = url.parse()?;
        if let Some(schema) = schema {
            let admin = PgPoolOptions::new().max_connections(1).connect_with(options.clone()).await?;
            let create = format!("create schema if not exists \"{}\"", schema.replace('"', ""));
            sqlx::raw_sql(sqlx::AssertSqlSafe(create)).execute(&admin).await?;
            admin.close().await;
            options = options.options([("search_path", schema)]);
        }
        let pool = PgPoolOptions::new().max_connections(16).connect_with(options).await?;
        sqlx::migrate!("../../migrations/postgres").run(&pool).await?;
        Ok(PostgresStore { pool })
    }
}

crate::imp::store_impl!(PostgresStore, sqlx::Postgres, "postgres", "BEGIN", " for update");
crate::dap::dap_impl!(PostgresStore, sqlx::Postgres, "BEGIN");
