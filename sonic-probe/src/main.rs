fn main() -> std::process::ExitCode {
    sonic_probe::cli::main()
}
