//! The floor a CodeSpace `read` is measured against: a bare rmcp server over the same stdio
//! transport with one `read` tool that answers with the same JSON shape and bytes as CodeSpace's
//! (`path`, `content`, `content_lossy`, `version`, `truncated`, `byte_count`; the structured
//! result and its text copy), and none of the work: no Cedar decision, no audit row, no version
//! hash (the version is a placeholder of the same length), no no-follow open. The file is read
//! on the async worker. What `scripts/bench-peers --floor` compares CodeSpace's ping and read to.
//!
//! ```text
//! cargo build --release -p codespace-mcp --example floor_server
//! target/release/examples/floor_server <root dir>      # then speak MCP on stdin/stdout
//! ```
#![allow(clippy::print_stderr)]

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::ServiceExt;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};

#[derive(Clone)]
struct Floor {
    root: Arc<PathBuf>,
}

fn read_tool() -> Tool {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "workspace_id": {"type": "string"},
            "path": {"type": "string"}
        },
        "required": ["path"]
    });
    let schema = match schema {
        serde_json::Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    Tool::new(
        "read",
        "Reads a file (floor server: no policy, no audit).",
        Arc::new(schema),
    )
}

impl ServerHandler for Floor {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, rmcp::ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![read_tool()]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, rmcp::ErrorData> {
        let path = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("path"))
            .and_then(|p| p.as_str())
            .unwrap_or_default();
        let bytes = std::fs::read(self.root.join(path))
            .map_err(|e| rmcp::ErrorData::invalid_params(format!("{path}: {e}"), None))?;
        let byte_count = bytes.len();
        let content = String::from_utf8_lossy(&bytes).into_owned();
        let v = serde_json::json!({
            "path": path,
            "content": content,
            "content_lossy": false,
            "version": format!("sha256:{}", "0".repeat(64)),
            "truncated": false,
            "byte_count": byte_count,
        });
        let text = serde_json::to_string(&v).unwrap_or_default();
        let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
        r.structured_content = Some(v);
        Ok(r.into())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let root = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .ok_or_else(|| anyhow::anyhow!("usage: floor_server <root dir>"))?;
    let transport = codespace_mcp::stdio::StdioTransport::process_stdio(4 << 20);
    let running = Floor {
        root: Arc::new(root),
    }
    .serve(transport)
    .await?;
    running.waiting().await?;
    Ok(())
}
