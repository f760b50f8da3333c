//! Chat templates: Jinja templates from `tokenizer_config.json` (or `chat_template.jinja`)
//! rendered with minijinja the way Hugging Face transformers renders them.

use super::TokenizerError;
use minijinja::{context, Environment, Error, ErrorKind};
use serde::{Deserialize, Serialize};

/// Name of the template inside the minijinja environment.
const TEMPLATE_NAME: &str = "chat";

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who speaks: `system`, `user` or `assistant`.
    pub role: String,
    /// What is said.
    pub content: String,
}

impl ChatMessage {
    /// A message from `role` saying `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }

    /// A `system` message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }

    /// A `user` message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }

    /// An `assistant` message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new("assistant", content)
    }
}

/// A compiled chat template and the special token texts it may refer to.
#[derive(Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source` with Jinja2 settings of transformers (`trim_blocks`, `lstrip_blocks`),
    /// Python string methods (`strip`, `startswith`, ...) and `raise_exception`.
    pub fn new(
        source: impl Into<String>,
        bos_token: impl Into<String>,
        eos_token: impl Into<String>,
    ) -> Result<Self, TokenizerError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_template_owned(TEMPLATE_NAME, source.into())
            .map_err(|e| TokenizerError::Template(describe(&e)))?;
        Ok(Self {
            env,
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
        })
    }

    /// Renders `messages`; `add_generation_prompt` appends the header of an assistant turn.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TokenizerError> {
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| TokenizerError::Template(describe(&e)))?;
        template
            .render(context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => self.bos_token,
                eos_token => self.eos_token,
            })
            .map_err(|e| TokenizerError::Template(describe(&e)))
    }
}

/// The `raise_exception(message)` function templates call to reject a conversation.
fn raise_exception(message: String) -> Result<String, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// A minijinja error with its chain of causes on one line.
fn describe(error: &Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn renders_chatml_with_generation_prompt() {
        let template = ChatTemplate::new(CHATML, "<s>", "</s>").unwrap();
        let messages = [ChatMessage::system("Be brief."), ChatMessage::user("Hi")];
        assert_eq!(
            template.render(&messages, true).unwrap(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert!(!template
            .render(&messages, false)
            .unwrap()
            .ends_with("assistant\n"));
    }

    #[test]
    fn block_tags_do_not_leave_newlines_or_indentation() {
        let source = "{% for m in messages %}\n    {% if m.content %}{{ m.content.strip() }}|{% endif %}\n{% endfor %}{{ bos_token }}";
        let template = ChatTemplate::new(source, "<s>", "</s>").unwrap();
        let rendered = template.render(&[ChatMessage::user("  a "), ChatMessage::user("b")], false);
        assert_eq!(rendered.unwrap(), "a|b|<s>");
    }

    #[test]
    fn raise_exception_becomes_an_error() {
        let source =
            "{% if messages[0].role != 'user' %}{{ raise_exception('user first') }}{% endif %}";
        let template = ChatTemplate::new(source, "", "").unwrap();
        let err = template
            .render(&[ChatMessage::assistant("x")], false)
            .unwrap_err();
        assert!(err.to_string().contains("user first"), "{err}");
    }

    #[test]
    fn syntax_errors_are_reported() {
        let err = ChatTemplate::new("{% for %}", "", "").unwrap_err();
        assert!(matches!(err, TokenizerError::Template(_)));
    }
}
