//! An independent plain-Rust implementation of the Llama-family forward pass (f64 loops over
//! the checkpoint tensors): biases wherever the checkpoint has them, grouped-query attention,
//! optionally over a sliding window, SwiGLU, norms and the (tied or separate) lm_head.

use aquila_model_loader::checkpoint::Checkpoint;
use aquila_model_loader::config::LlamaConfig;

/// A plain-Rust Llama reading weights straight from the checkpoint.
pub struct Reference<'a> {
    /// Sizes, norm epsilon and RoPE settings.
    pub config: LlamaConfig,
    /// The weights.
    pub checkpoint: &'a Checkpoint,
    /// Sliding-window attention over this many positions, or full causal attention.
    pub window: Option<usize>,
}

impl Reference<'_> {
    fn tensor(&self, name: &str) -> Vec<f64> {
        self.checkpoint
            .read_f32(name)
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect()
    }

    /// `y = W x (+ b)` with `W` stored `[out, in]`; the bias is added when the checkpoint
    /// has one.
    fn linear(&self, prefix: &str, x: &[f64]) -> Vec<f64> {
        let bias = self.checkpoint.contains(&format!("{prefix}.bias"));
        let w = self.tensor(&format!("{prefix}.weight"));
        let d_in = x.len();
        let mut y: Vec<f64> = w
            .chunks_exact(d_in)
            .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
            .collect();
        if bias {
            for (v, b) in y.iter_mut().zip(self.tensor(&format!("{prefix}.bias"))) {
                *v += b;
            }
        }
        y
    }

    fn rms_norm(&self, name: &str, x: &[f64]) -> Vec<f64> {
        let w = self.tensor(name);
        let mean_sq = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
        let scale = 1.0 / (mean_sq + self.config.rms_norm_eps).sqrt();
        x.iter().zip(w).map(|(v, w)| v * scale * w).collect()
    }

    /// Rotates one head (rotate-half layout) to `position`.
    fn rope(&self, head: &mut [f64], position: usize) {
        let half = head.len() / 2;
        let freqs = self.config.rope.inverse_frequencies(head.len());
        for i in 0..half {
            let angle = position as f64 * freqs[i];
            let (a, b) = (head[i], head[i + half]);
            head[i] = a * angle.cos() - b * angle.sin();
            head[i + half] = b * angle.cos() + a * angle.sin();
        }
    }

    /// Logits of every position of `tokens` (causal, positions 0..n).
    pub fn logits(&self, tokens: &[u32]) -> Vec<Vec<f64>> {
        let c = &self.config;
        let (hidden, hd) = (c.hidden_size, c.head_dim);
        let group = c.num_attention_heads / c.num_key_value_heads;
        let embed = self.tensor("model.embed_tokens.weight");
        let mut xs: Vec<Vec<f64>> = tokens
            .iter()
            .map(|&t| embed[t as usize * hidden..(t as usize + 1) * hidden].to_vec())
            .collect();
        for layer in 0..c.num_hidden_layers {
            let p = format!("model.layers.{layer}");
            let mut qs = Vec::new();
            let mut ks = Vec::new();
            let mut vs = Vec::new();
            for (pos, x) in xs.iter().enumerate() {
                let h = self.rms_norm(&format!("{p}.input_layernorm.weight"), x);
                let mut q = self.linear(&format!("{p}.self_attn.q_proj"), &h);
                let mut k = self.linear(&format!("{p}.self_attn.k_proj"), &h);
                for head in q.chunks_exact_mut(hd).chain(k.chunks_exact_mut(hd)) {
                    self.rope(head, pos);
                }
                qs.push(q);
                ks.push(k);
                vs.push(self.linear(&format!("{p}.self_attn.v_proj"), &h));
            }
            for (t, x) in xs.iter_mut().enumerate() {
                let mut attended = vec![0.0; c.q_width()];
                for head in 0..c.num_attention_heads {
                    let kv = head / group;
                    let q = &qs[t][head * hd..(head + 1) * hd];
                    let first = self.window.map_or(0, |w| (t + 1).saturating_sub(w));
                    let scores: Vec<f64> = (first..=t)
                        .map(|s| {
                            let k = &ks[s][kv * hd..(kv + 1) * hd];
                            q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() / (hd as f64).sqrt()
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let total: f64 = weights.iter().sum();
                    for (s, w) in (first..=t).zip(&weights) {
                        let v = &vs[s][kv * hd..(kv + 1) * hd];
                        for (o, v) in attended[head * hd..(head + 1) * hd].iter_mut().zip(v) {
                            *o += w / total * v;
                        }
                    }
                }
                let o = self.linear(&format!("{p}.self_attn.o_proj"), &attended);
                for (x, o) in x.iter_mut().zip(o) {
                    *x += o;
                }
                let h = self.rms_norm(&format!("{p}.post_attention_layernorm.weight"), x);
                let gate = self.linear(&format!("{p}.mlp.gate_proj"), &h);
                let up = self.linear(&format!("{p}.mlp.up_proj"), &h);
                let act: Vec<f64> = gate
                    .iter()
                    .zip(&up)
                    .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                    .collect();
                let down = self.linear(&format!("{p}.mlp.down_proj"), &act);
                for (x, d) in x.iter_mut().zip(down) {
                    *x += d;
                }
            }
        }
        let head_name = if self.checkpoint.contains("lm_head.weight") {
            "lm_head"
        } else {
            "model.embed_tokens"
        };
        xs.iter()
            .map(|x| self.linear(head_name, &self.rms_norm("model.norm.weight", x)))
            .collect()
    }
}
