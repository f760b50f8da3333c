//! The EAGLE-3 draft vocabulary: which target token each draft lm_head row stands for.
//!
//! EAGLE-3 heads predict over a reduced vocabulary of `draft_vocab_size` frequent tokens. The
//! checkpoint stores the mapping as offsets: `d2t[i]` is added to draft id `i` to get the target
//! id (`target = i + d2t[i]`), and `t2d` marks the target ids that have a draft row. Heads whose
//! draft vocabulary is the whole target vocabulary carry no mapping (identity).

use super::EagleError;

/// Maps draft lm_head rows to target token ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DraftVocabMap {
    /// `None`: identity over the target vocabulary; otherwise the target id of each draft row.
    target_ids: Option<Vec<u32>>,
    target_vocab_size: usize,
}

impl DraftVocabMap {
    /// The identity map: draft row `i` is target token `i`.
    pub fn identity(vocab_size: usize) -> Self {
        Self {
            target_ids: None,
            target_vocab_size: vocab_size,
        }
    }

    /// A map from checkpoint offsets `d2t` (one per draft row) and, when present, the target
    /// membership mask `t2d` (one per target token), which must mark exactly the mapped ids.
    ///
    /// Every mapped id must be inside the target vocabulary and no two rows may map to the
    /// same id.
    pub fn from_offsets(
        d2t: &[i64],
        t2d: Option<&[bool]>,
        target_vocab_size: usize,
    ) -> Result<Self, EagleError> {
        let mut target_ids = Vec::with_capacity(d2t.len());
        let mut mapped = vec![false; target_vocab_size];
        for (draft_id, &offset) in d2t.iter().enumerate() {
            let target = draft_id as i64 + offset;
            if target < 0 || target >= target_vocab_size as i64 {
                return Err(EagleError::VocabMap(format!(
                    "d2t[{draft_id}] = {offset} maps draft token {draft_id} to {target}, outside the target \
                     vocabulary of {target_vocab_size}"
                )));
            }
            let target = target as usize;
            if std::mem::replace(&mut mapped[target], true) {
                return Err(EagleError::VocabMap(format!(
                    "d2t maps two draft tokens to target token {target} (the second is draft token {draft_id})"
                )));
            }
            target_ids.push(target as u32);
        }
        if let Some(t2d) = t2d {
            if t2d.len() != target_vocab_size {
                return Err(EagleError::VocabMap(format!(
                    "t2d has {} entries, expected one per target token ({target_vocab_size})",
                    t2d.len()
                )));
            }
            if let Some(token) = (0..target_vocab_size).find(|&t| t2d[t] != mapped[t]) {
                return Err(EagleError::VocabMap(format!(
                    "t2d[{token}] is {} but d2t {} target token {token}",
                    t2d[token],
                    if mapped[token] {
                        "maps a draft token to"
                    } else {
                        "maps no draft token to"
                    }
                )));
            }
        }
        Ok(Self {
            target_ids: Some(target_ids),
            target_vocab_size,
        })
    }

    /// The mapping of a checkpoint: [`DraftVocabMap::from_offsets`], except that a mapping over
    /// the whole target vocabulary must be the identity (the reference drops such buffers) and
    /// becomes [`DraftVocabMap::identity`].
    pub fn from_checkpoint(
        d2t: &[i64],
        t2d: Option<&[bool]>,
        target_vocab_size: usize,
    ) -> Result<Self, EagleError> {
        let map = Self::from_offsets(d2t, t2d, target_vocab_size)?;
        if map.draft_vocab_size() < target_vocab_size {
            return Ok(map);
        }
        match d2t.iter().position(|&offset| offset != 0) {
            Some(draft_id) => Err(EagleError::VocabMap(format!(
                "the draft vocabulary is the whole vocabulary ({target_vocab_size}), but d2t[{draft_id}] = {} \
                 is not 0",
                d2t[draft_id]
            ))),
            None => Ok(Self::identity(target_vocab_size)),
        }
    }

    /// The map of a draft vocabulary made of `target_ids` (draft row `i` stands for
    /// `target_ids[i]`; a trainer keeps the most frequent target tokens, sorted). Every id must
    /// be inside the target vocabulary and appear once. A list of every target id must be in
    /// order and gives [`DraftVocabMap::identity`] (the only full-vocabulary mapping a
    /// checkpoint may hold).
    pub fn from_target_ids(
        target_ids: &[u32],
        target_vocab_size: usize,
    ) -> Result<Self, EagleError> {
        if target_ids.is_empty() {
            return Err(EagleError::VocabMap(
                "the draft vocabulary is empty".to_string(),
            ));
        }
        let mut mapped = vec![false; target_vocab_size];
        for (draft_id, &target) in target_ids.iter().enumerate() {
            let Some(seen) = mapped.get_mut(target as usize) else {
                return Err(EagleError::VocabMap(format!(
                    "draft token {draft_id} stands for target token {target}, outside the target \
                     vocabulary of {target_vocab_size}"
                )));
            };
            if std::mem::replace(seen, true) {
                return Err(EagleError::VocabMap(format!(
                    "target token {target} is listed twice (the second time as draft token {draft_id})"
                )));
            }
        }
        if target_ids.len() < target_vocab_size {
            return Ok(Self {
                target_ids: Some(target_ids.to_vec()),
                target_vocab_size,
            });
        }
        match (0..target_vocab_size).find(|&i| target_ids[i] as usize != i) {
            Some(draft_id) => Err(EagleError::VocabMap(format!(
                "a draft vocabulary of every target token must keep their order, but draft token \
                 {draft_id} stands for target token {}",
                target_ids[draft_id]
            ))),
            None => Ok(Self::identity(target_vocab_size)),
        }
    }

    /// The checkpoint offsets: `d2t[i] = target_id(i) - i`, one per draft row (all zero for
    /// the identity). [`DraftVocabMap::from_checkpoint`] of them gives this map back.
    pub fn d2t(&self) -> Vec<i64> {
        match &self.target_ids {
            Some(ids) => ids
                .iter()
                .enumerate()
                .map(|(i, &target)| i64::from(target) - i as i64)
                .collect(),
            None => vec![0; self.target_vocab_size],
        }
    }

    /// The checkpoint membership mask: `t2d[t]` says whether target token `t` has a draft row
    /// (all true for the identity).
    pub fn t2d(&self) -> Vec<bool> {
        match &self.target_ids {
            Some(ids) => {
                let mut mapped = vec![false; self.target_vocab_size];
                for &target in ids {
                    mapped[target as usize] = true;
                }
                mapped
            }
            None => vec![true; self.target_vocab_size],
        }
    }

    /// Whether draft ids are target ids (no mapping applied).
    pub fn is_identity(&self) -> bool {
        self.target_ids.is_none()
    }

    /// Number of draft lm_head rows.
    pub fn draft_vocab_size(&self) -> usize {
        self.target_ids
            .as_ref()
            .map_or(self.target_vocab_size, Vec::len)
    }

    /// Size of the target vocabulary.
    pub fn target_vocab_size(&self) -> usize {
        self.target_vocab_size
    }

    /// The target token for draft row `draft_id` (which must be below
    /// [`DraftVocabMap::draft_vocab_size`]).
    pub fn to_target(&self, draft_id: u32) -> u32 {
        match &self.target_ids {
            Some(ids) => ids[draft_id as usize],
            None => draft_id,
        }
    }

    /// Spreads one row of draft-vocabulary values over the target vocabulary: mapped ids get
    /// their draft value, every other id `fill` (`-inf` for logits, 0 for probabilities).
    pub fn scatter_row(&self, draft_row: &[f32], fill: f32) -> Vec<f32> {
        match &self.target_ids {
            None => draft_row.to_vec(),
            Some(ids) => {
                let mut row = vec![fill; self.target_vocab_size];
                for (&target, &value) in ids.iter().zip(draft_row) {
                    row[target as usize] = value;
                }
                row
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_map_sorted_frequent_tokens_to_target_ids() {
        // Draft vocabulary {1, 4, 5} of a target vocabulary of 8.
        let map = DraftVocabMap::from_offsets(&[1, 3, 3], None, 8).unwrap();
        assert_eq!(
            (0..3).map(|i| map.to_target(i)).collect::<Vec<_>>(),
            vec![1, 4, 5]
        );
        assert_eq!(map.draft_vocab_size(), 3);
        assert!(!map.is_identity());
        let row = map.scatter_row(&[0.5, 1.5, 2.5], f32::NEG_INFINITY);
        assert_eq!(row.len(), 8);
        assert_eq!((row[1], row[4], row[5]), (0.5, 1.5, 2.5));
        assert!(row
            .iter()
            .enumerate()
            .all(|(i, v)| [1, 4, 5].contains(&i) || *v == f32::NEG_INFINITY));
    }

    #[test]
    fn t2d_must_mark_exactly_the_mapped_tokens() {
        let mut t2d = vec![false; 8];
        for t in [1, 4, 5] {
            t2d[t] = true;
        }
        assert!(DraftVocabMap::from_offsets(&[1, 3, 3], Some(&t2d), 8).is_ok());
        t2d[6] = true;
        let err = DraftVocabMap::from_offsets(&[1, 3, 3], Some(&t2d), 8).unwrap_err();
        assert!(err.to_string().contains("t2d[6] is true"), "{err}");
        let err = DraftVocabMap::from_offsets(&[1, 3, 3], Some(&t2d[..7]), 8).unwrap_err();
        assert!(err.to_string().contains("t2d has 7 entries"), "{err}");
    }

    #[test]
    fn out_of_range_and_colliding_offsets_are_rejected() {
        let err = DraftVocabMap::from_offsets(&[0, 7], None, 8).unwrap_err();
        assert!(err.to_string().contains("d2t[1] = 7"), "{err}");
        let err = DraftVocabMap::from_offsets(&[-1], None, 8).unwrap_err();
        assert!(err.to_string().contains("to -1"), "{err}");
        let err = DraftVocabMap::from_offsets(&[2, 1], None, 8).unwrap_err();
        assert!(
            err.to_string()
                .contains("two draft tokens to target token 2"),
            "{err}"
        );
    }

    #[test]
    fn a_full_vocabulary_mapping_must_be_the_identity() {
        let map = DraftVocabMap::from_checkpoint(&[0, 0, 0], None, 3).unwrap();
        assert!(map.is_identity());
        // A permutation of the whole vocabulary is not what a full-vocabulary head stores.
        let err = DraftVocabMap::from_checkpoint(&[1, -1, 0], None, 3).unwrap_err();
        assert!(err.to_string().contains("d2t[0] = 1 is not 0"), "{err}");
        assert!(!DraftVocabMap::from_checkpoint(&[1, 2], None, 5)
            .unwrap()
            .is_identity());
    }

    #[test]
    fn target_ids_build_the_map_and_its_checkpoint_buffers() {
        let map = DraftVocabMap::from_target_ids(&[1, 4, 5], 8).unwrap();
        assert_eq!(
            map,
            DraftVocabMap::from_offsets(&[1, 3, 3], None, 8).unwrap()
        );
        assert_eq!(map.d2t(), vec![1, 3, 3]);
        let t2d = map.t2d();
        assert_eq!(t2d, [false, true, false, false, true, true, false, false]);
        assert_eq!(
            DraftVocabMap::from_checkpoint(&map.d2t(), Some(&t2d), 8).unwrap(),
            map
        );

        let full = DraftVocabMap::from_target_ids(&[0, 1, 2], 3).unwrap();
        assert!(full.is_identity());
        assert_eq!((full.d2t(), full.t2d()), (vec![0; 3], vec![true; 3]));
        assert_eq!(
            DraftVocabMap::from_checkpoint(&full.d2t(), Some(&full.t2d()), 3).unwrap(),
            full
        );
    }

    #[test]
    fn bad_target_id_lists_are_rejected() {
        for (ids, expected) in [
            (&[][..], "empty"),
            (&[1, 8][..], "target token 8, outside"),
            (&[2, 5, 2][..], "target token 2 is listed twice"),
        ] {
            let err = DraftVocabMap::from_target_ids(ids, 8).unwrap_err();
            assert!(err.to_string().contains(expected), "{err}");
        }
        let err = DraftVocabMap::from_target_ids(&[1, 0, 2], 3).unwrap_err();
        assert!(err.to_string().contains("keep their order"), "{err}");
    }

    #[test]
    fn identity_maps_every_id_to_itself() {
        let map = DraftVocabMap::identity(5);
        assert!(map.is_identity());
        assert_eq!(map.to_target(4), 4);
        assert_eq!(map.draft_vocab_size(), 5);
        assert_eq!(map.scatter_row(&[1.0, 2.0], 0.0), vec![1.0, 2.0]);
    }
}
