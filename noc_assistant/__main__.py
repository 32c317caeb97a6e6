from noc_assistant.cli import main

main()
