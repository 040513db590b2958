from creditflow.cli import main

main()
