#include <iostream>
int main() { std::cout << "kestrel\n"; return 0; }
