//! The `shofer` command-line tool (placeholder until the engine lands).
fn main() {
    eprintln!("shofer: not built yet");
    std::process::exit(2);
}
