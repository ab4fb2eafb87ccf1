fn main() { println!("attn: not yet"); }
