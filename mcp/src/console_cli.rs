//! `codespace console --config FILE [--listen ADDR]`: the web console's pages, read-only, against
//! the store (no running server; no grant or deny), behind the same Host/Origin guard as
//! `serve --http`.

use codespace_engine::{Config, PolicyStore};
use codespace_store::Store;
use std::sync::Arc;

/// `codespace console --config FILE [--listen ADDR]`: the pages read-only against the store.
#[derive(clap::Args)]
pub struct ConsoleArgs {
    /// Operator config (its `store`, policies, `clients` and `console.operators`).
    #[arg(long, env = "CODESPACE_CONFIG")]
    pub config: std::path::PathBuf,
    /// The store (default: the config's `store`).
    #[arg(long)]
    pub store: Option<std::path::PathBuf>,
    /// Listen address.
    #[arg(long, default_value = "127.0.0.1:8788", value_parser = crate::http::parse_addr)]
    pub listen: std::net::SocketAddr,
}

/// Runs `codespace console` until interrupted.
pub async fn run_read_only(args: ConsoleArgs) -> anyhow::Result<()> {
    use anyhow::{Context, anyhow};
    let config =
        Config::load(&args.config).with_context(|| format!("config {}", args.config.display()))?;
    if config.clients.is_empty() {
        return Err(anyhow!(
            "the console signs in with the tokens of `clients`: configure at least one client (and name operators in console.operators)"
        ));
    }
    let path = args
        .store
        .clone()
        .or_else(|| config.store.clone())
        .ok_or_else(|| anyhow!("no store: pass --store FILE or set `store` in the config"))?;
    if !path.exists() {
        return Err(anyhow!("no store at {}", path.display()));
    }
    let store =
        Arc::new(Store::open(&path).with_context(|| format!("cannot open {}", path.display()))?);
    let source = match &config.policies_dir {
        None => codespace_engine::policy::PolicySource::Embedded,
        Some(p) => codespace_engine::policy::PolicySource::Dir {
            policies: p.clone(),
            schema: config.schema_file.clone().unwrap_or_else(|| {
                p.parent()
                    .unwrap_or(std::path::Path::new("."))
                    .join("schema/codespace.cedarschema")
            }),
        },
    };
    let policies = Arc::new(
        PolicyStore::load_linked(
            source,
            config.profiles.keys().cloned().collect(),
            None,
            config.policy_templates.clone(),
        )
        .map_err(|e| anyhow!("policies: {e}"))?,
    );
    let identities = Box::new(crate::console::StaticTokens::new(&config.clients));
    let console = crate::console::Console::new(
        crate::console::Backend {
            config,
            store: Some(store),
            policies,
            live: false,
        },
        identities,
    );
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let local = listener.local_addr()?;
    let router = crate::http::guarded(
        crate::console::router(console),
        local,
        &crate::http::HttpOptions::new(local),
    )
    .map_err(|e| anyhow!("{e}"))?;
    eprintln!(
        "codespace: serving the read-only console at http://{local}{}",
        crate::console::CONSOLE_PATH
    );
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .context("console server")?;
    Ok(())
}
