//! Greedy decoding as onnx-asr 0.12.0 does it (`onnx_asr/asr.py`: `_AsrWithCtcDecoding`,
//! `_AsrWithTransducerDecoding`, `_decode_tokens`; `onnx_asr/models/nemo.py`: the TDT step),
//! transcribed, and the vocabulary and text rules it uses.

use std::path::Path;

use crate::error::ModelError;

/// `vocab.txt`: one `token id` per line; `▁` (U+2581) stands for a space; the blank is the
/// token `<blk>`.
#[derive(Debug, Clone, PartialEq)]
pub struct Vocab {
    tokens: Vec<String>,
    blank: Option<usize>,
}

impl Vocab {
    pub fn read(path: &Path) -> Result<Self, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|e| ModelError::Model {
            path: path.to_path_buf(),
            reason: format!("cannot read the vocabulary: {e}"),
        })?;
        Self::parse(&text).map_err(|reason| ModelError::Model {
            path: path.to_path_buf(),
            reason,
        })
    }

    /// As onnx-asr reads it: `line.strip("\n").split(" ")` must give a token and an id.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut pairs = Vec::new();
        for (n, line) in text.split_inclusive('\n').enumerate() {
            let line = line.strip_suffix('\n').unwrap_or(line);
            let mut parts = line.split(' ');
            let (Some(token), Some(id), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(format!("line {}: not `token id`: {line:?}", n + 1));
            };
            let id: usize = id
                .parse()
                .map_err(|_| format!("line {}: the id {id:?} is not a number", n + 1))?;
            pairs.push((id, token.replace('\u{2581}', " ")));
        }
        if pairs.is_empty() {
            return Err("the vocabulary is empty".into());
        }
        let size = pairs.len();
        let mut tokens = vec![None; size];
        for (id, token) in pairs {
            match tokens.get_mut(id) {
                Some(slot @ None) => *slot = Some(token),
                Some(Some(_)) => return Err(format!("the id {id} appears twice")),
                None => {
                    return Err(format!(
                        "the id {id} is not below the vocabulary's size {size}"
                    ))
                }
            }
        }
        let tokens: Vec<String> = tokens.into_iter().map(Option::unwrap_or_default).collect();
        let blank = tokens.iter().position(|t| t == "<blk>");
        Ok(Vocab { tokens, blank })
    }

    /// Tokens, blank included (onnx-asr's `_vocab_size`).
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The blank's id.
    pub fn blank(&self) -> Option<usize> {
        self.blank
    }

    pub fn token(&self, id: usize) -> &str {
        &self.tokens[id]
    }

    /// The text of `ids`: tokens joined, then `re.sub(r"\A\s|\s\B|(\s)\b", ...)`: a space is
    /// kept (as " ") only where a word character follows it and it does not open the text.
    /// Each match is one whitespace character, so the rule applies to each on its own. Word
    /// characters are Unicode letters, digits and `_` (Python's `\w`; Rust's alphanumeric
    /// differs only on combining marks, which no NeMo vocabulary puts after a space).
    pub fn text(&self, ids: &[usize]) -> String {
        let joined: String = ids.iter().map(|&i| self.token(i)).collect();
        let chars: Vec<char> = joined.chars().collect();
        let word = |c: char| c.is_alphanumeric() || c == '_';
        let mut text = String::with_capacity(joined.len());
        for (i, &c) in chars.iter().enumerate() {
            if !c.is_whitespace() {
                text.push(c);
            } else if i > 0 && chars.get(i + 1).is_some_and(|&n| word(n)) {
                text.push(' ');
            }
        }
        text
    }
}

/// First index of the largest value (numpy's `argmax`; NaN, which numpy returns first, is
/// taken as larger than anything too).
pub fn argmax(values: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in values.iter().enumerate() {
        if v.is_nan() {
            return i;
        }
        if v > values[best] {
            best = i;
        }
    }
    best
}

/// Greedy CTC of `logprobs` (`frames × vocab`, time-major), of which the first `len` frames
/// are valid: the argmax per frame, kept where it is not the blank and differs from the frame
/// before (the first frame compares with the blank). Returns the token ids and their frames.
pub fn ctc_greedy(
    logprobs: &[f32],
    vocab: usize,
    len: usize,
    blank: usize,
) -> (Vec<usize>, Vec<usize>) {
    let mut tokens = Vec::new();
    let mut frames = Vec::new();
    let mut prev = blank;
    for (t, row) in logprobs.chunks_exact(vocab).enumerate() {
        let token = argmax(row);
        // np.diff over the whole row, padding included, but the mask keeps t < len only.
        if t < len && token != blank && token != prev {
            tokens.push(token);
            frames.push(t);
        }
        prev = token;
    }
    (tokens, frames)
}

/// One step of a transducer's decoder + joint network.
pub trait Joint {
    type State: Clone;
    /// The state before any token.
    fn initial(&mut self) -> Result<Self::State, String>;
    /// The joint's output for encoder frame `frame` after token `prev` (the blank before the
    /// first): token logits, then (TDT) duration logits; and the decoder's next state.
    fn step(
        &mut self,
        frame: &[f32],
        prev: usize,
        state: &Self::State,
    ) -> Result<(Vec<f32>, Self::State), String>;
}

/// Greedy transducer decoding of `frames` (each a `dim` vector, time-major) of which the first
/// `len` are valid; `vocab` tokens, blank included. With more outputs than tokens it is TDT:
/// the step is the argmax of the rest (onnx-asr takes the index as the duration, which NeMo's
/// TDT durations [0, 1, 2, 3, 4] make equal). Returns the tokens and the frames they were
/// emitted at.
pub fn transducer_greedy<J: Joint>(
    joint: &mut J,
    frames: &[f32],
    dim: usize,
    len: usize,
    vocab: usize,
    blank: usize,
    max_tokens_per_step: usize,
) -> Result<(Vec<usize>, Vec<usize>), String> {
    let mut state = joint.initial()?;
    let mut tokens = Vec::new();
    let mut times = Vec::new();
    let (mut t, mut emitted) = (0usize, 0usize);
    while t < len {
        let frame = &frames[t * dim..(t + 1) * dim];
        let prev = tokens.last().copied().unwrap_or(blank);
        let (out, next_state) = joint.step(frame, prev, &state)?;
        if out.len() < vocab {
            return Err(format!(
                "the joint gave {} values, fewer than the {vocab} tokens",
                out.len()
            ));
        }
        let token = argmax(&out[..vocab]);
        // RNN-T (no durations): -1, as onnx-asr's NemoConformerRnnt returns.
        let step = if out.len() > vocab {
            argmax(&out[vocab..]) as i64
        } else {
            -1
        };
        if token != blank {
            state = next_state;
            tokens.push(token);
            times.push(t);
            emitted += 1;
        }
        if step > 0 {
            t += step as usize;
            emitted = 0;
        } else if token == blank || emitted == max_tokens_per_step {
            t += 1;
            emitted = 0;
        }
    }
    Ok((tokens, times))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab() -> Vocab {
        Vocab::parse("▁he 0\nllo 1\n▁wor 2\nld 3\n. 4\n▁, 5\n<blk> 6\n").unwrap()
    }

    #[test]
    fn vocab_reads_ids_spaces_and_the_blank() {
        let v = vocab();
        assert_eq!((v.len(), v.blank()), (7, Some(6)));
        assert_eq!(v.token(0), " he");
        assert!(Vocab::parse("a 0\nb 0\n").is_err());
        assert!(Vocab::parse("a 0\nb 5\n").is_err());
        assert!(Vocab::parse("a b 0\n").is_err());
        assert!(Vocab::parse("").is_err());
    }

    /// The spaces rule of onnx-asr's DECODE_SPACE_PATTERN, worked by hand: the leading space
    /// goes, a space before a word stays, a space before punctuation or at the end goes.
    #[test]
    fn text_keeps_spaces_only_before_words() {
        let v = vocab();
        assert_eq!(v.text(&[0, 1, 2, 3, 4]), "hello world.");
        assert_eq!(v.text(&[0, 5, 2]), "he, wor");
        assert_eq!(v.text(&[]), "");
    }

    #[test]
    fn ctc_collapses_repeats_and_blanks_within_the_length() {
        // Frames' argmax: 1 1 blank 1 2 2 | 3 (past the length).
        let rows = [1, 1, 6, 1, 2, 2, 3];
        let mut lp = vec![-10.0f32; rows.len() * 7];
        for (t, &k) in rows.iter().enumerate() {
            lp[t * 7 + k] = 0.0;
        }
        assert_eq!(ctc_greedy(&lp, 7, 6, 6), (vec![1, 1, 2], vec![0, 3, 4]));
    }

    #[test]
    fn argmax_takes_the_first_of_ties() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0]), 1);
        assert_eq!(argmax(&[1.0, f32::NAN, 3.0]), 1);
    }

    /// A joint that plays back a script of (token, duration) per call.
    struct Script(Vec<(usize, usize)>, usize);
    impl Joint for Script {
        type State = usize;
        fn initial(&mut self) -> Result<usize, String> {
            Ok(0)
        }
        fn step(&mut self, _: &[f32], _: usize, s: &usize) -> Result<(Vec<f32>, usize), String> {
            let (tok, dur) = self.0[self.1];
            self.1 += 1;
            let mut out = vec![0.0; 3 + 5];
            out[tok] = 1.0;
            out[3 + dur] = 1.0;
            Ok((out, s + 1))
        }
    }

    #[test]
    fn tdt_jumps_by_durations_and_caps_tokens_per_frame() {
        // Vocab 3 (blank 2). t=0: token 0, dur 0 (stay); token 1, dur 2 → t=2; blank dur 0 →
        // t=3; token 0, dur 0 three times with max 2 per step → t=4 after two; end at len 5.
        let mut j = Script(vec![(0, 0), (1, 2), (2, 0), (0, 0), (0, 0), (2, 1)], 0);
        let frames = vec![0.0; 5 * 4];
        let (tokens, times) = transducer_greedy(&mut j, &frames, 4, 5, 3, 2, 2).unwrap();
        assert_eq!(tokens, vec![0, 1, 0, 0]);
        assert_eq!(times, vec![0, 0, 3, 3]);
    }

    /// A joint of exactly the vocabulary (RNN-T): no durations, one frame per blank, at most
    /// `max_tokens_per_step` tokens per frame.
    #[test]
    fn rnnt_steps_one_frame_per_blank() {
        struct Rnnt(Vec<usize>, usize);
        impl Joint for Rnnt {
            type State = ();
            fn initial(&mut self) -> Result<(), String> {
                Ok(())
            }
            fn step(&mut self, _: &[f32], _: usize, _: &()) -> Result<(Vec<f32>, ()), String> {
                let mut out = vec![0.0; 3];
                out[self.0[self.1]] = 1.0;
                self.1 += 1;
                Ok((out, ()))
            }
        }
        // t=0: 1, 1, 1 (the cap of 3 moves on); t=1: blank; t=2: 0, blank.
        let mut j = Rnnt(vec![1, 1, 1, 2, 0, 2], 0);
        let (tokens, times) = transducer_greedy(&mut j, &[0.0; 3], 1, 3, 3, 2, 3).unwrap();
        assert_eq!(tokens, vec![1, 1, 1, 0]);
        assert_eq!(times, vec![0, 0, 0, 2]);
    }
}
