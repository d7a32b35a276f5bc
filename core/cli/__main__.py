from core.cli.app import main

main()
