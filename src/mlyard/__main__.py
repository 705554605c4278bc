from mlyard.cli import main

main()
