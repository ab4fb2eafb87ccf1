//! IR passes: folding, CSE, DCE, layout assignment; a verifier runs after each in debug builds.
