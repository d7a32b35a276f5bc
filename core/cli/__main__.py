from core.cli.app import console

console()
