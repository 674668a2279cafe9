fn main() -> std::process::ExitCode {
    sonic_probe::dispatch::main()
}
