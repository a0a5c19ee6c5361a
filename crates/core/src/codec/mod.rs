//! Byte-exact encoders and decoders of HAMi's annotation values.
