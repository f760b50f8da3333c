//! A streaming writer of float32 safetensors files: the header is written first from the
//! tensor shapes, then each tensor's values as they are produced, so an import never holds
//! more than a batch of tensors in memory.

use super::GgufError;
use serde_json::{json, Map, Value};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `model.safetensors` tensor by tensor, in the order given to [`Self::create`]. The
/// data goes to a temporary file that [`Self::finish`] renames into place; dropping an
/// unfinished writer deletes it.
pub(crate) struct SafetensorsWriter {
    path: PathBuf,
    partial: PathBuf,
    /// `None` once finished.
    out: Option<std::io::BufWriter<std::fs::File>>,
    /// Name and element count of every tensor, in write order.
    layout: Vec<(String, usize)>,
    written: usize,
}

impl SafetensorsWriter {
    /// Creates `path` (through a temporary file) with the header for `tensors` (name, shape).
    pub(crate) fn create(path: &Path, tensors: &[(String, Vec<usize>)]) -> Result<Self, GgufError> {
        let mut header = Map::new();
        header.insert("__metadata__".into(), json!({ "format": "pt" }));
        let mut offset = 0usize;
        let mut layout = Vec::with_capacity(tensors.len());
        for (name, shape) in tensors {
            let elements: usize = shape.iter().product();
            let end = offset + elements * std::mem::size_of::<f32>();
            header.insert(
                name.clone(),
                json!({ "dtype": "F32", "shape": shape, "data_offsets": [offset, end] }),
            );
            layout.push((name.clone(), elements));
            offset = end;
        }
        let mut header =
            serde_json::to_vec(&Value::Object(header)).map_err(|e| GgufError::Safetensors {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        // The data section starts 8-byte aligned; the format pads the header with spaces.
        header.resize(header.len().div_ceil(8) * 8, b' ');

        let partial = path.with_extension("safetensors.partial");
        let file = std::fs::File::create(&partial).map_err(|e| GgufError::io(&partial, e))?;
        let mut out = std::io::BufWriter::with_capacity(8 << 20, file);
        out.write_all(&(header.len() as u64).to_le_bytes())
            .and_then(|()| out.write_all(&header))
            .map_err(|e| GgufError::io(&partial, e))?;
        Ok(Self {
            path: path.to_path_buf(),
            partial,
            out: Some(out),
            layout,
            written: 0,
        })
    }

    /// Writes the next tensor; `name` and the value count must follow the header.
    pub(crate) fn write_tensor(&mut self, name: &str, values: &[f32]) -> Result<(), GgufError> {
        match self.layout.get(self.written) {
            Some((expected, elements)) if expected == name && *elements == values.len() => {}
            _ => {
                return Err(GgufError::Safetensors {
                    path: self.path.clone(),
                    message: format!(
                        "tensor {name:?} with {} values is not the next in the header",
                        values.len()
                    ),
                })
            }
        }
        let bytes: std::borrow::Cow<'_, [u8]> = if cfg!(target_endian = "little") {
            std::borrow::Cow::Borrowed(bytemuck::cast_slice(values))
        } else {
            std::borrow::Cow::Owned(values.iter().flat_map(|v| v.to_le_bytes()).collect())
        };
        let out = self.out.as_mut().ok_or_else(|| GgufError::Safetensors {
            path: self.path.clone(),
            message: "writer already finished".into(),
        })?;
        out.write_all(&bytes)
            .map_err(|e| GgufError::io(&self.partial, e))?;
        self.written += 1;
        Ok(())
    }

    /// Checks every tensor was written, flushes, and renames the file into place.
    pub(crate) fn finish(mut self) -> Result<(), GgufError> {
        if self.written != self.layout.len() {
            return Err(GgufError::Safetensors {
                path: self.path.clone(),
                message: format!("{} of {} tensors written", self.written, self.layout.len()),
            });
        }
        let Some(out) = self.out.take() else {
            return Ok(());
        };
        let file = out
            .into_inner()
            .map_err(|e| GgufError::io(&self.partial, e.into_error()))?;
        file.sync_all()
            .map_err(|e| GgufError::io(&self.partial, e))?;
        std::fs::rename(&self.partial, &self.path).map_err(|e| GgufError::io(&self.path, e))
    }
}

impl Drop for SafetensorsWriter {
    fn drop(&mut self) {
        if self.out.take().is_some() {
            // Best effort: an unfinished file must not look like a model.
            let _ = std::fs::remove_file(&self.partial);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_file_reads_back_with_the_safetensors_crate() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.safetensors");
        let tensors = vec![("b".to_string(), vec![2, 3]), ("a".to_string(), vec![1])];
        let mut writer = SafetensorsWriter::create(&path, &tensors).unwrap();
        writer
            .write_tensor("b", &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
            .unwrap();
        writer.write_tensor("a", &[-0.5]).unwrap();
        writer.finish().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let b = st.tensor("b").unwrap();
        assert_eq!(
            (b.dtype(), b.shape()),
            (safetensors::Dtype::F32, &[2usize, 3][..])
        );
        assert_eq!(&b.data()[4..8], &2.0f32.to_le_bytes());
        assert_eq!(st.tensor("a").unwrap().data(), &(-0.5f32).to_le_bytes());
        let (_, metadata) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
        assert_eq!(metadata.metadata().as_ref().unwrap()["format"], "pt");
    }

    #[test]
    fn out_of_order_or_missing_tensors_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.safetensors");
        let tensors = vec![("a".to_string(), vec![2]), ("b".to_string(), vec![1])];
        let mut writer = SafetensorsWriter::create(&path, &tensors).unwrap();
        assert!(writer.write_tensor("b", &[0.0]).is_err());
        assert!(writer.write_tensor("a", &[0.0]).is_err(), "wrong length");
        writer.write_tensor("a", &[0.0, 1.0]).unwrap();
        assert!(writer.finish().is_err());
        assert!(!path.exists());
        assert!(
            !path.with_extension("safetensors.partial").exists(),
            "partial file removed"
        );
    }
}
