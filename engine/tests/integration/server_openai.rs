//! The official `openai` Python client drives the server on SmolLM2: completions and chat,
//! streamed and not; greedy outputs equal the offline engine's, and streamed deltas
//! concatenate to the whole text.
//!
//! The test installs the client from PyPI into a virtual environment under the target
//! directory (`target/tmp/openai-venv`) the first time, and fails saying so when it cannot.

use std::path::{Path, PathBuf};
use std::process::Command;

use aquila_engine::{AsyncLlmConfig, ChatMessage, EngineConfig, Llm, Prompt, SamplingParams};
use serde_json::{json, Value};

use crate::common::real_model_dir;
use crate::common::server::TestServer;

const MAX_TOKENS: usize = 16;

/// Runs `command`, panicking with `what` and its output when it fails.
fn run(command: &mut Command, what: &str) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A Python with the `openai` package: the venv under the target directory, made on first use.
fn openai_python() -> PathBuf {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("openai-venv");
    let python = venv.join("bin").join("python");
    let has_openai = |python: &Path| {
        Command::new(python)
            .args(["-c", "import openai"])
            .output()
            .is_ok_and(|output| output.status.success())
    };
    if has_openai(&python) {
        return python;
    }
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        "creating a Python venv for the openai client (needs python3 with venv)",
    );
    run(
        Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "openai>=1.40,<3",
        ]),
        "installing the openai client from PyPI into the venv",
    );
    python
}

fn messages_json(messages: &[ChatMessage]) -> Value {
    Value::Array(
        messages
            .iter()
            .map(|m| json!({"role": m.role, "content": m.content}))
            .collect(),
    )
}

#[test]
fn the_openai_client_gets_the_offline_engines_greedy_outputs() {
    let Some(model_dir) = real_model_dir() else {
        return;
    };
    let python = openai_python();
    let prompts = ["The capital of France is", "def fibonacci(n):"];
    let chats = [
        vec![ChatMessage::user("What is the tallest mountain on Earth?")],
        vec![
            ChatMessage::system("You are a helpful assistant."),
            ChatMessage::user("Name three primary colors."),
        ],
    ];
    let params = SamplingParams::greedy(MAX_TOKENS);
    let mut llm = Llm::new(EngineConfig::new(&model_dir)).expect("SmolLM2");
    let expected_completions = llm.generate(prompts.to_vec(), &params).unwrap();
    let chat_prompts: Vec<Prompt> = chats.iter().cloned().map(Prompt::Chat).collect();
    let expected_chats = llm.generate(chat_prompts, &params).unwrap();

    let server = TestServer::serve(llm, AsyncLlmConfig::default());
    let work = tempfile::tempdir().unwrap();
    let cases = json!({
        "completions": prompts,
        "chats": chats.iter().map(|c| messages_json(c)).collect::<Vec<_>>(),
        "max_tokens": MAX_TOKENS,
    });
    let cases_path = work.path().join("cases.json");
    let output_path = work.path().join("output.json");
    std::fs::write(&cases_path, cases.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openai/openai_client.py");
    run(
        Command::new(&python)
            .arg(&script)
            .arg(format!("{}/v1", server.server.url()))
            .arg(server.model())
            .arg(&cases_path)
            .arg(&output_path),
        "the openai client script",
    );
    let output: Value =
        serde_json::from_str(&std::fs::read_to_string(&output_path).unwrap()).unwrap();

    assert_eq!(output["models"], json!([server.model()]));
    let results = output["completions"]
        .as_array()
        .unwrap()
        .iter()
        .chain(output["chats"].as_array().unwrap());
    let expected = expected_completions.iter().chain(&expected_chats);
    for (result, expected) in results.zip(expected) {
        assert_eq!(result["text"], expected.text.as_str(), "{result:#}");
        assert_eq!(result["stream_text"], expected.text.as_str(), "{result:#}");
        assert!(result["stream_chunks"].as_u64().unwrap() > 1, "{result:#}");
        let reason = expected.finish_reason.as_str();
        assert_eq!(result["finish_reason"], reason);
        assert_eq!(result["stream_finish_reason"], reason);
        assert_eq!(
            result["usage"]["prompt_tokens"],
            expected.prompt_token_ids.len()
        );
        assert_eq!(
            result["usage"]["completion_tokens"],
            expected.token_ids.len()
        );
    }
    for chat in output["chats"].as_array().unwrap() {
        assert_eq!(chat["role"], "assistant");
        assert_eq!(chat["stream_roles"], json!(["assistant"]));
    }
    for completion in output["completions"].as_array().unwrap() {
        assert_eq!(completion["stream_usage"], completion["usage"]);
    }
    assert_eq!(output["unknown_model"]["status"], 404);
    assert_eq!(output["bad_temperature"]["status"], 400);
    let message = output["bad_temperature"]["message"].as_str().unwrap();
    assert!(message.contains("temperature"), "{message}");
}
